"""Message batches: one numpy structured array per batch, plus an optional CSR payload.

The engine needs only a few columns of a message (``ENGINE_FIELDS``: when it is due, who
sent it to whom, its type, the sender's sequence number and where its payload is); every
other column belongs to a protocol. Protocols declare their columns as field lists and the
stack composes one record with :func:`message_dtype`, which it hands to the engine
(``Emulator(message_dtype=...)``); the engine moves those records without reading a
protocol column by name. Variable-length data (Pastry table rows, leaf sets) rides in
``Batch.payload``, a flat int32 array indexed by the rows' ``pay_off``/``pay_len``; taking
a subset of rows compacts it so batches never drag along payload that no row references.
"""

from __future__ import annotations

import numpy as np

from . import kernels

# The engine's columns. The payload reference closes the record so that a stack's record
# keeps the engine's head, then the protocols' columns in the order they were declared.
ENGINE_HEAD_FIELDS = [("time", "i8"), ("sent", "i8"), ("src", "i4"), ("dst", "i4"),
                      ("seq", "i8"), ("type", "i2")]
PAYLOAD_FIELDS = [("pay_off", "i8"), ("pay_len", "i4")]
ENGINE_FIELDS = ENGINE_HEAD_FIELDS + PAYLOAD_FIELDS
ENGINE_FIELD_NAMES = frozenset(name for name, _ in ENGINE_FIELDS)


def message_dtype(*field_lists) -> np.dtype:
    """The message record of a stack: the engine's fields plus every protocol's declared
    ``[(name, numpy type), ...]``, merged by name (a protocol may declare a field another
    declared, or an engine field, with the same type; a different type is an error)."""
    fields: dict[str, np.dtype] = {}

    def add(name, kind, owner):
        kind = np.dtype(kind)
        have = fields.setdefault(name, kind)
        if have != kind:
            raise ValueError(f"message field {name!r} declared as {have} and as {kind} "
                             f"({owner})")

    for name, kind in ENGINE_HEAD_FIELDS:
        add(name, kind, "engine")
    for i, field_list in enumerate(field_lists):
        for name, kind in field_list:
            add(name, kind, f"field list {i}")
    for name, kind in PAYLOAD_FIELDS:
        if name in fields:
            add(name, kind, "engine")
        else:
            fields[name] = np.dtype(kind)
    head = [n for n in fields if n not in ("pay_off", "pay_len")]
    return np.dtype([(n, fields[n]) for n in [*head, "pay_off", "pay_len"]])


ENGINE_DTYPE = message_dtype()   # the engine's fields alone (control messages, tests)
_VALID_DTYPES: set = {ENGINE_DTYPE}
_last_valid = ENGINE_DTYPE


def check_message_dtype(dtype) -> np.dtype:
    """`dtype` if it is a message record (every engine field, with the engine's type)."""
    global _last_valid
    if dtype is _last_valid:        # the common case: every batch of a run has one record
        return dtype
    dtype = np.dtype(dtype)
    if dtype in _VALID_DTYPES:
        _last_valid = dtype
        return dtype
    names = dtype.names or ()
    wrong = [n for n, kind in ENGINE_FIELDS
             if n not in names or dtype.fields[n][0] != np.dtype(kind)]
    if wrong:
        raise TypeError(f"not a message record (see emulator.batch.message_dtype): fields "
                        f"{wrong} missing or of another type in {dtype}")
    _VALID_DTYPES.add(dtype)
    _last_valid = dtype
    return dtype


def as_messages(msgs, dtype) -> np.ndarray:
    """`msgs` as records of `dtype`: the array itself if it has that dtype, else a copy with
    its columns matched by name (columns it lacks are zero; a column `dtype` lacks is an
    error, never dropped silently)."""
    msgs = np.asarray(msgs)
    if msgs.dtype == dtype:
        return msgs
    extra = [n for n in (msgs.dtype.names or ()) if n not in dtype.names]
    if msgs.dtype.names is None or extra:
        raise TypeError(f"messages with fields {msgs.dtype.names} do not fit the message "
                        f"record {dtype.names} (unknown: {extra})")
    out = np.zeros(len(msgs), dtype)
    for name in msgs.dtype.names:
        out[name] = msgs[name]
    return out


NO_PAYLOAD = np.zeros(0, np.int32)


_ROW_VIEWS: dict[int, np.dtype] = {}


def _row_view(dtype: np.dtype) -> np.dtype:
    """Rows moved as opaque records: numpy copies structured rows field by field (40x slower
    than moving the same bytes as one void item), and the engine moves rows a lot. Cached
    by record size: building the void dtype costs more than the copy of a small batch."""
    row = _ROW_VIEWS.get(dtype.itemsize)
    if row is None:
        row = _ROW_VIEWS[dtype.itemsize] = np.dtype((np.void, dtype.itemsize))
    return row


def take_rows(msgs, idx) -> np.ndarray:
    """msgs[idx] as a new array, copied as whole records (``take_rows(m, slice(None))``
    is a copy of m: 3x faster than ``m.copy()``, which copies a record field by field);
    ``msgs`` may be a :class:`SparseBatch`, whose rows are then rebuilt."""
    if isinstance(msgs, SparseBatch):
        return msgs.records(idx)
    row = _row_view(msgs.dtype)
    if isinstance(idx, slice):
        return records_of(msgs[idx].view(row).copy(), msgs.dtype)
    return records_of(msgs.view(row)[idx], msgs.dtype)


def records_of(rows: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A new contiguous array of opaque rows (``_row_view``) seen as records of
    ``dtype``, no copy: ``np.frombuffer``, which costs ~0.5 us where ``.view(dtype)``
    checks every field of the record in Python (~2 us), on every pop and pass."""
    return np.frombuffer(rows, dtype)


class Batch:
    """Message records (any :func:`message_dtype`) and the flat payload they index.
    Cheap to slice (views)."""

    # ``local``: the engine's local index (int64) of each row's ``dst``, set on the runs it
    # dispatches (one compiled pass per cell computes them for every run); None elsewhere
    __slots__ = ("msgs", "payload", "local")

    def __init__(self, msgs: np.ndarray, payload: np.ndarray | None = None):
        check_message_dtype(msgs.dtype)
        self.msgs = msgs
        self.payload = NO_PAYLOAD if payload is None else np.asarray(payload, np.int32)
        self.local = None

    @classmethod
    def run(cls, msgs: np.ndarray, payload: np.ndarray, local: np.ndarray) -> Batch:
        """A run of a popped cell handed to the stack: ``msgs`` a slice of records already
        checked, ``payload`` the cell's int32 payload, ``local`` the rows' local indices.
        Built without :meth:`__init__`'s checks: a cell of sparse traffic has a handful of
        runs, and each costs a Python call or two."""
        b = cls.__new__(cls)
        b.msgs, b.payload, b.local = msgs, payload, local
        return b

    def __len__(self) -> int:
        return len(self.msgs)

    def __repr__(self) -> str:
        return f"Batch({len(self.msgs)} msgs, {len(self.payload)} payload ints)"

    @classmethod
    def empty(cls, dtype=ENGINE_DTYPE) -> Batch:
        return cls(np.zeros(0, dtype))

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
    def concat(batches, dtype=None) -> Batch:
        """One batch of all rows, payload offsets shifted; O(total rows + payload). The
        batches share one record `dtype` (default: the first batch's), which an empty
        result also has."""
        batches = list(batches)
        if dtype is None:
            if not batches:
                raise ValueError("Batch.concat of no batches needs the record dtype")
            dtype = batches[0].msgs.dtype
        if not all(b.msgs.dtype is dtype or b.msgs.dtype == dtype for b in batches):
            # rows are copied as raw bytes: another layout would be silently garbled
            raise TypeError(f"Batch.concat: batches of different message records "
                            f"{sorted({str(b.msgs.dtype) for b in batches})}")
        batches = [b for b in batches if len(b)]
        if not batches:
            return Batch.empty(dtype)
        if len(batches) == 1:
            return batches[0]
        out = np.empty(sum(len(b) for b in batches), dtype)
        carries = [b.has_payload for b in batches]
        if not any(carries):
            _fill(out, [b.msgs for b in batches])
            return Batch(out)
        parts, pays, moved, base, pos = [], [], [], 0, 0
        for b, carry in zip(batches, carries, strict=True):
            if carry:
                if int(b.msgs["pay_len"].sum()) < len(b.payload):
                    # rows reference only part of it (a slice of a larger batch): copy that
                    # part; a batch made by pack_rows or concat is copied as it is
                    b = b.take(slice(None))
                if base:
                    moved.append((pos, len(b), base))   # its offsets follow earlier payload
                base += len(b.payload)
                pays.append(b.payload)
            parts.append(b.msgs)
            pos += len(b)
        _fill(out, parts)
        for start, rows, shift in moved:
            out["pay_off"][start:start + rows] += shift
        return Batch(out, np.concatenate(pays))


class SparseBatch:
    """A batch sent as the fields of its records that are not zero in every row, one
    column each, and its payload: the driver's stimuli for a whole phase (a JOIN request
    sets 9 of the record's 18 fields, 50 of its 105 bytes), which wait in the object
    store, read-only, until their shard moves them into its queue as they come due.
    Whole records would hold the object store's pages for every field; they stay
    resident until Ray stops.
    ``records(idx)`` rebuilds rows ``idx`` as whole records, equal to the original ones."""

    __slots__ = ("dtype", "n", "columns", "payload")

    def __init__(self, batch: Batch):
        m = batch.msgs
        self.dtype, self.n, self.payload = m.dtype, len(m), batch.payload
        self.columns = {f: np.ascontiguousarray(m[f]) for f in m.dtype.names if m[f].any()}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, name: str) -> np.ndarray:
        """One field of every row, as a record array's ``m[name]`` (zeros where the batch
        sent none)."""
        col = self.columns.get(name)
        return np.zeros(self.n, self.dtype[name]) if col is None else col

    def records(self, idx=slice(None)) -> np.ndarray:
        """Rows ``idx`` (a slice, indices or a mask) as whole records, a new array.
        O(rows x fields sent)."""
        if isinstance(idx, slice):
            n = len(range(*idx.indices(self.n)))
        else:
            idx = np.asarray(idx)
            n = int(idx.sum()) if idx.dtype == np.bool_ else len(idx)
        out = np.zeros(n, self.dtype)
        for name, col in self.columns.items():
            out[name] = col[idx]
        return out

    def whole(self) -> Batch:
        return Batch(self.records(), self.payload)


def _fill(out: np.ndarray, parts) -> None:
    # slice assignment of equal dtypes is a memcpy; np.concatenate of structured arrays
    # re-derives the common dtype field by field, which dominates for many small parts
    row = _row_view(out.dtype)
    raw = out.view(row)
    pos = 0
    for p in parts:
        raw[pos:pos + len(p)] = p.view(row) if p.flags.c_contiguous else p.copy().view(row)
        pos += len(p)


def pack_rows(rows) -> dict:
    """Payload fields for ``ctx.send``: message i carries row i of ``rows`` (int matrix,
    -1 entries dropped). Returns {"payload", "pay_off", "pay_len"}; O(rows.size), one
    compiled pass (handlers pack a few rows per call, where numpy's per-call cost ruled)."""
    rows = np.asarray(rows)
    if rows.dtype.kind not in "iu":
        rows = rows.astype(np.int64)
    payload, offs, lens = kernels.pack_rows(rows if rows.flags.c_contiguous
                                            else np.ascontiguousarray(rows))
    return {"payload": payload, "pay_off": offs, "pay_len": lens}


def payload_rows(msgs: np.ndarray, payload: np.ndarray, width: int | None = None) -> np.ndarray:
    """Each message's payload as a row of an int64 matrix, -1 padded; ``width`` columns
    (default: the longest segment; longer segments are cut). Inverse of `pack_rows`."""
    lens = msgs["pay_len"]
    if width is None:
        width = int(lens.max()) if len(lens) else 0
    if not len(payload):
        return np.full((len(msgs), width), -1, np.int64)
    return kernels.payload_rows(np.ascontiguousarray(msgs["pay_off"]), np.ascontiguousarray(lens),
                                np.asarray(payload, np.int32), int(width))


def new_messages(n: int, dtype=ENGINE_DTYPE, **fields) -> np.ndarray:
    """A zeroed array of n message records of `dtype` with `fields` set (broadcast)."""
    m = np.zeros(n, dtype)
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
    """Row order of a cell's messages: by type, then (time, src, seq) -- the determinism key
    (a stable sort: rows with equal keys keep their order). The engine's queue hands out
    its cells in this order already (``EventQueue.pop_cell``)."""
    if len(m) > kernels.SORT_MAX:
        return np.lexsort((m["seq"], m["src"], m["time"], m["type"]))
    return kernels.dispatch_sort(m["type"], m["time"], m["src"], m["seq"])
