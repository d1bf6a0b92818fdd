"""Message batches: one numpy structured array per batch, plus an optional CSR payload.

Every message the engine moves is a row of ``MSG_DTYPE`` (docs/ARCHITECTURE.md lists the
fields). Variable-length data (Pastry table rows, leaf sets) rides in ``Batch.payload``, a
flat int32 array indexed by the rows' ``pay_off``/``pay_len``; taking a subset of rows
compacts it so batches never drag along payload that no row references.
"""

from __future__ import annotations

import numpy as np

from . import kernels

MSG_DTYPE = np.dtype([
    ("time", "i8"), ("sent", "i8"), ("src", "i4"), ("dst", "i4"), ("seq", "i8"),
    ("type", "i2"), ("mode", "i1"), ("origin", "i4"), ("key_hi", "u8"), ("key_lo", "u8"),
    ("group", "i4"), ("hops", "i2"), ("path_us", "i8"), ("a", "i8"), ("b", "i8"),
    ("c", "i8"), ("pay_off", "i8"), ("pay_len", "i4"),
])

NO_PAYLOAD = np.zeros(0, np.int32)
# Rows moved as opaque records: numpy copies structured rows field by field (40x slower
# than moving the same bytes as one void item), and the engine moves rows a lot.
_ROW = np.dtype((np.void, MSG_DTYPE.itemsize))


def take_rows(msgs: np.ndarray, idx) -> np.ndarray:
    """msgs[idx] as a new array, copied as whole records."""
    if isinstance(idx, slice):
        return msgs[idx].copy()
    return msgs.view(_ROW)[idx].view(MSG_DTYPE)


class Batch:
    """Rows of MSG_DTYPE and the flat payload they index. Cheap to slice (views)."""

    __slots__ = ("msgs", "payload")

    def __init__(self, msgs: np.ndarray, payload: np.ndarray | None = None):
        if msgs.dtype != MSG_DTYPE:
            raise TypeError(f"Batch needs MSG_DTYPE rows, got {msgs.dtype}")
        self.msgs = msgs
        self.payload = NO_PAYLOAD if payload is None else np.asarray(payload, np.int32)

    def __len__(self) -> int:
        return len(self.msgs)

    def __repr__(self) -> str:
        return f"Batch({len(self.msgs)} msgs, {len(self.payload)} payload ints)"

    @classmethod
    def empty(cls) -> Batch:
        return cls(np.zeros(0, MSG_DTYPE))

    @property
    def has_payload(self) -> bool:
        return len(self.payload) > 0 and bool(self.msgs["pay_len"].any())

    def take(self, idx) -> Batch:
        """Rows `idx` (indices or mask) with a compacted payload; O(rows + payload taken)."""
        m = take_rows(self.msgs, idx)
        if not len(self.payload):
            return Batch(m)
        payload = kernels.compact_payload(m["pay_off"], m["pay_len"], self.payload)
        return Batch(m, payload) if len(payload) else Batch(m)

    def segment(self, i: int) -> np.ndarray:
        """Payload of row i (a view)."""
        o, n = int(self.msgs["pay_off"][i]), int(self.msgs["pay_len"][i])
        return self.payload[o:o + n]

    @staticmethod
    def concat(batches) -> Batch:
        """One batch of all rows, payload offsets shifted; O(total rows + payload)."""
        batches = [b for b in batches if len(b)]
        if not batches:
            return Batch.empty()
        if len(batches) == 1:
            return batches[0]
        out = np.empty(sum(len(b) for b in batches), MSG_DTYPE)
        if not any(b.has_payload for b in batches):
            _fill(out, [b.msgs for b in batches])
            return Batch(out)
        parts, pays, base = [], [], 0
        for b in batches:
            if b.has_payload:
                b = b.take(slice(None))  # drop payload no row references before copying
                b.msgs["pay_off"] += base
                base += len(b.payload)
                pays.append(b.payload)
            parts.append(b.msgs)
        _fill(out, parts)
        return Batch(out, np.concatenate(pays))


def _fill(out: np.ndarray, parts) -> None:
    # slice assignment of equal dtypes is a memcpy; np.concatenate of structured arrays
    # re-derives the common dtype field by field, which dominates for many small parts
    raw = out.view(_ROW)
    pos = 0
    for p in parts:
        raw[pos:pos + len(p)] = p.view(_ROW) if p.flags.c_contiguous else p.copy().view(_ROW)
        pos += len(p)


def pack_rows(rows) -> dict:
    """Payload fields for ``ctx.send``: message i carries row i of ``rows`` (int matrix,
    -1 entries dropped). Returns {"payload", "pay_off", "pay_len"}; O(rows.size)."""
    rows = np.asarray(rows, np.int64)
    keep = rows >= 0
    lens = keep.sum(axis=1)
    offs = np.cumsum(lens) - lens
    return {"payload": rows[keep].astype(np.int32), "pay_off": offs.astype(np.int64),
            "pay_len": lens}


def payload_rows(msgs: np.ndarray, payload: np.ndarray, width: int | None = None) -> np.ndarray:
    """Each message's payload as a row of an int64 matrix, -1 padded; ``width`` columns
    (default: the longest segment; longer segments are cut). Inverse of `pack_rows`."""
    lens = msgs["pay_len"].astype(np.int64)
    if width is None:
        width = int(lens.max()) if len(lens) else 0
    lens = np.minimum(lens, width)
    j = np.arange(width)[None, :]
    ok = j < lens[:, None]
    idx = np.where(ok, msgs["pay_off"][:, None] + j, 0)
    return np.where(ok, np.asarray(payload, np.int64)[idx] if len(payload) else -1, -1)


def new_messages(n: int, **fields) -> np.ndarray:
    """A zeroed MSG_DTYPE array of n rows with `fields` set (broadcast)."""
    m = np.zeros(n, MSG_DTYPE)
    for name, value in fields.items():
        m[name] = value
    return m


def rank_within(keys) -> np.ndarray:
    """For each row, how many earlier rows have the same key (0 for the first); O(n log n).

    Handlers that must treat several messages to one node as successive steps split a
    batch into rounds `rank_within(dst) == r`, each with distinct destinations.
    """
    keys = np.asarray(keys)
    n = len(keys)
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    start = np.ones(n, bool)
    start[1:] = sk[1:] != sk[:-1]
    first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    ranks = np.empty(n, np.int64)
    ranks[order] = np.arange(n) - first
    return ranks


def dispatch_order(m: np.ndarray) -> np.ndarray:
    """Row order of a cell's messages: by type, then (time, src, seq) -- the determinism key."""
    return np.lexsort((m["seq"], m["src"], m["time"], m["type"]))
