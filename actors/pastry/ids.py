"""128-bit Pastry identifiers as pairs of uint64 columns ``(hi, lo)``.

Every function is vectorized over numpy arrays (any broadcastable shapes) and exact:
no conversion to float anywhere, so no bit of the 128 is ever lost. Digits are base
``2**b`` and numbered from the most significant end (digit 0 is the top ``b`` bits),
as in Pastry. ``b`` must divide 64 so that a digit never straddles ``hi`` and ``lo``.
"""

from __future__ import annotations

import hashlib

import numpy as np

from actors.params import Param

U64 = np.uint64
_ONE = U64(1)
# Pastry's digit width, declared here where digits are cut (a Pastry parameter: state.SIZES):
# the widths that divide 64
DIGIT_BITS = Param(int, 4, "bits per id digit: the routing table has 2^b columns",
                   choices=(1, 2, 4, 8, 16))
# high word of half the ring (2^127): a distance d is below half the ring iff d_hi < this
HALF_RING_HI = U64(1 << 63)


def check_b(b: int) -> int:
    """Validate the digit width against :data:`DIGIT_BITS`; returns it as int."""
    why = DIGIT_BITS.problem("Pastry digit width b", b)
    if why is not None:
        raise ValueError(why)
    return int(b)


def n_digits(b: int) -> int:
    """Number of base-2^b digits of a 128-bit id."""
    return 128 // check_b(b)


def sha1_id(text: str) -> tuple[int, int]:
    """(hi, lo) of the first 16 bytes of SHA-1(text), big-endian."""
    d = hashlib.sha1(text.encode()).digest()
    return int.from_bytes(d[:8], "big"), int.from_bytes(d[8:16], "big")


def node_ids(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Node ids of nodes 0..n-1: first 16 bytes of SHA-1(f"node:{seed}:{i}").

    O(n) hashes. Raises ValueError if two ids collide (astronomically unlikely, but the
    routing code assumes distinct ids).
    """
    if n < 0:
        raise ValueError(f"node_ids: n must be >= 0, got {n}")
    raw = b"".join(hashlib.sha1(f"node:{seed}:{i}".encode()).digest()[:16] for i in range(n))
    words = np.frombuffer(raw, dtype=">u8").reshape(n, 2).astype(np.uint64)
    hi, lo = words[:, 0].copy(), words[:, 1].copy()
    if n > 1:
        o = np.lexsort((lo, hi))
        if ((np.diff(hi[o]) == 0) & (np.diff(lo[o]) == 0)).any():
            raise ValueError(f"node_ids: duplicate 128-bit ids for n={n}, seed={seed}")
    return hi, lo


def to_hex(hi, lo) -> np.ndarray:
    """32-digit lowercase hex strings (object array), for logs meant for people."""
    hi = np.atleast_1d(np.asarray(hi, U64))
    lo = np.atleast_1d(np.asarray(lo, U64))
    return np.array([f"{int(h):016x}{int(l):016x}" for h, l in zip(hi, lo, strict=True)],
                    dtype=object)


def from_int(values) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) arrays from Python ints in [0, 2^128) (for tests and keys)."""
    vals = [int(v) for v in np.atleast_1d(np.asarray(values, dtype=object))]
    if any(v < 0 or v >> 128 for v in vals):
        raise ValueError("from_int: values must lie in [0, 2**128)")
    hi = np.array([v >> 64 for v in vals], dtype=U64)
    lo = np.array([v & ((1 << 64) - 1) for v in vals], dtype=U64)
    return hi, lo


def to_int(hi, lo) -> list[int]:
    """Python ints of (hi, lo) arrays (for tests)."""
    hi = np.atleast_1d(np.asarray(hi, U64)).ravel()
    lo = np.atleast_1d(np.asarray(lo, U64)).ravel()
    return [(int(h) << 64) | int(l) for h, l in zip(hi, lo, strict=True)]


def digit(hi, lo, pos, b: int = 4) -> np.ndarray:
    """Digit number ``pos`` (0 = most significant) of each id, as int64. O(n)."""
    b = check_b(b)
    hi = np.asarray(hi, U64)
    lo = np.asarray(lo, U64)
    pos = np.asarray(pos, np.int64)
    per_word = 64 // b
    mask = U64((1 << b) - 1)
    in_hi = pos < per_word
    shift_hi = np.clip(64 - b * (pos + 1), 0, 63).astype(U64)
    shift_lo = np.clip(128 - b * (pos + 1), 0, 63).astype(U64)
    d = np.where(in_hi, (hi >> shift_hi) & mask, (lo >> shift_lo) & mask)
    return d.astype(np.int64)


def _clz64(x) -> np.ndarray:
    """Count of leading zero bits of uint64 values (64 for 0), exact. O(n)."""
    x = np.array(x, dtype=U64, copy=True)
    for s in (1, 2, 4, 8, 16, 32):
        x |= x >> U64(s)
    return 64 - np.bitwise_count(x).astype(np.int64)


def shared_prefix_len(ahi, alo, bhi, blo, b: int = 4) -> np.ndarray:
    """Number of leading base-2^b digits two ids share (128/b when equal). O(n)."""
    b = check_b(b)
    xh = np.asarray(ahi, U64) ^ np.asarray(bhi, U64)
    xl = np.asarray(alo, U64) ^ np.asarray(blo, U64)
    bits = np.where(xh != 0, _clz64(xh), 64 + _clz64(xl))
    return bits // b


def sub(ahi, alo, bhi, blo) -> tuple[np.ndarray, np.ndarray]:
    """(a - b) mod 2^128, exact with borrow. O(n)."""
    ahi, alo = np.asarray(ahi, U64), np.asarray(alo, U64)
    bhi, blo = np.asarray(bhi, U64), np.asarray(blo, U64)
    lo = alo - blo
    borrow = (alo < blo).astype(U64)
    hi = ahi - bhi - borrow
    return hi, lo


def less(ahi, alo, bhi, blo) -> np.ndarray:
    """a < b as unsigned 128-bit integers. O(n)."""
    ahi, alo = np.asarray(ahi, U64), np.asarray(alo, U64)
    bhi, blo = np.asarray(bhi, U64), np.asarray(blo, U64)
    return (ahi < bhi) | ((ahi == bhi) & (alo < blo))


def ring_dist(ahi, alo, bhi, blo) -> tuple[np.ndarray, np.ndarray]:
    """Wrap-around distance min((a-b) mod 2^128, (b-a) mod 2^128) as (hi, lo). O(n)."""
    d1h, d1l = sub(ahi, alo, bhi, blo)
    d2h, d2l = sub(bhi, blo, ahi, alo)
    first = less(d1h, d1l, d2h, d2l)
    return np.where(first, d1h, d2h), np.where(first, d1l, d2l)


def cw_dist(ahi, alo, bhi, blo) -> tuple[np.ndarray, np.ndarray]:
    """Clockwise distance from a to b: (b - a) mod 2^128. O(n)."""
    return sub(bhi, blo, ahi, alo)


def closest_key_order(c_hi, c_lo, k_hi, k_lo, valid=None, cand_ids=None) -> np.ndarray:
    """Index (last axis) of the candidate numerically closest to the key on the ring.

    ``c_*`` have shape (..., c); ``k_*`` shape (...,). Equal distances (key exactly
    between two ids) go to the candidate with the smaller id (hi, then lo), which makes
    "the numerically closest node" a total, shard-independent function. -1 when no
    valid candidate. O(rows * c).
    """
    k_hi = np.asarray(k_hi, U64)[..., None]
    k_lo = np.asarray(k_lo, U64)[..., None]
    dh, dl = ring_dist(c_hi, c_lo, k_hi, k_lo)
    c_hi = np.asarray(c_hi, U64)
    c_lo = np.asarray(c_lo, U64)
    if valid is None:
        valid = np.ones(dh.shape, bool)
    top = U64(np.iinfo(np.uint64).max)
    ok = valid.copy()
    for arr in (dh, dl, c_hi, c_lo):  # lexicographic (distance, id)
        a = np.where(ok, arr, top)
        ok &= a == a.min(axis=-1, keepdims=True)
    idx = np.argmax(ok, axis=-1)
    return np.where(ok.any(axis=-1), idx, -1)


def sorted_order(hi, lo) -> np.ndarray:
    """Permutation sorting ids ascending as 128-bit integers. O(n log n)."""
    return np.lexsort((np.asarray(lo, U64), np.asarray(hi, U64)))


def closest_node(sorted_hi, sorted_lo, order, k_hi, k_lo) -> np.ndarray:
    """Global node numerically closest to each key, by binary search on sorted ids.

    ``order`` sorts all (live) node ids: ``sorted_hi = hi[order]`` etc. Ties as in
    :func:`closest_key_order`. O(q log n).
    """
    n = len(order)
    if n == 0:
        raise ValueError("closest_node: no nodes")
    k_hi = np.atleast_1d(np.asarray(k_hi, U64))
    k_lo = np.atleast_1d(np.asarray(k_lo, U64))
    pos = searchsorted128(sorted_hi, sorted_lo, k_hi, k_lo)
    cand = np.stack([(pos - 1) % n, pos % n], axis=-1)
    pick = closest_key_order(sorted_hi[cand], sorted_lo[cand], k_hi, k_lo)
    return order[cand[np.arange(len(cand)), pick]]


def searchsorted128(sorted_hi, sorted_lo, k_hi, k_lo) -> np.ndarray:
    """Left insertion points of 128-bit keys into ascending (hi, lo) arrays. O(q log n)."""
    sorted_hi = np.asarray(sorted_hi, U64)
    sorted_lo = np.asarray(sorted_lo, U64)
    k_hi = np.asarray(k_hi, U64)
    k_lo = np.asarray(k_lo, U64)
    start = np.searchsorted(sorted_hi, k_hi, side="left")
    end = np.searchsorted(sorted_hi, k_hi, side="right")
    run = end - start
    safe = np.minimum(start, max(len(sorted_lo) - 1, 0))
    pos = start + ((run == 1) & (sorted_lo[safe] < k_lo) if len(sorted_lo) else 0)
    # longer runs of equal hi words need a search on lo (never seen with random ids)
    for i in np.flatnonzero(run > 1):
        pos[i] = start[i] + np.searchsorted(sorted_lo[start[i]:end[i]], k_lo[i], side="left")
    return pos
