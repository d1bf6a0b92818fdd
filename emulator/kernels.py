"""Compiled engine kernels (numba, cached): the per-message loops of sending.

Plain ``@numba.njit(cache=True)`` functions over numpy arrays, each one per-message loop of
sending (docs/ARCHITECTURE.md, "Compiled kernels"), and the primitives the protocols'
kernels share (host delay, payload packing, unique-first). Nothing here knows a protocol.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.extending import intrinsic


def read_only(value):
    """A numpy array as a read-only view, a dict (a shared table, such as Scribe's groups)
    with its arrays so, anything else as it is: for the data every shard shares
    (``ShardEngine.shared``, the latency model's tables). numba compiles a kernel once per
    argument type, and "readonly array" is a type of its own: Ray hands a shard these
    arrays read-only from its object store, so in-process runs get them read-only too, and
    every kernel that reads them compiles once for both. Read-only everywhere also states
    the contract: a shard must not write what the others share."""
    if isinstance(value, dict):
        return {k: read_only(v) for k, v in value.items()}
    if isinstance(value, np.ndarray) and value.flags.writeable:
        value = value.view()
        value.flags.writeable = False
    return value


# per-node tables with fewer rows than this stay in a core's caches: naming the next
# row's lines to them then costs instructions and saves no wait (kernels that prefetch
# do it from this many rows on)
PREFETCH_MIN_ROWS = 4096


@intrinsic
def prefetch(typingctx, arr, offset):
    """Ask the CPU to bring element ``offset`` of array ``arr`` (counted in memory from its
    first element: the flat index of a C-contiguous array) into its caches, without
    waiting for it (LLVM's prefetch: no fault and no result, whatever the address). A
    kernel that reads the state of one random node after another waits for each cache miss
    in turn; naming the next node's lines first lets their loads run while it works on
    this one. O(1)."""
    if not isinstance(arr, types.Array) or not isinstance(offset, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        i64, i32, i8p = ir.IntType(64), ir.IntType(32), ir.IntType(8).as_pointer()
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        size = context.get_abi_sizeof(context.get_data_type(sig.args[0].dtype))
        off = builder.mul(context.cast(builder, args[1], sig.args[1], types.int64),
                          ir.Constant(i64, size))
        ptr = builder.inttoptr(builder.add(builder.ptrtoint(ary.data, i64), off), i8p)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
            "llvm.prefetch.p0i8")
        # (a read, kept in every cache level, of data)
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.none(arr, offset), codegen


@numba.njit(cache=True)
def host_delay(host_router, router_dist, lan_us, a, b):
    """The latency rule, the one place it is written: the one-way delay (us, int64) from
    host ``a`` to host ``b`` = lan + dist[router(a), router(b)] + lan, 0 for a == b. Every
    compiled delay (sends' arrival times, the protocols' proximity probes) is this. O(1)."""
    if a == b:
        return np.int64(0)
    return np.int64(router_dist[host_router[a], host_router[b]]) + 2 * np.int64(lan_us)


@numba.njit(cache=True, inline="always")
def prefetch_delay(host_router, router_dist, a, b):
    """:func:`prefetch` of the entry of ``router_dist`` that :func:`host_delay` (a, b) reads,
    for a kernel that will probe that delay soon. O(1)."""
    prefetch(router_dist, np.int64(host_router[a]) * len(router_dist) + host_router[b])


@numba.njit(cache=True)
def router_latency(host_router, router_dist, lan_us, a, b):
    """:func:`host_delay` of each pair (a[i], b[i]) (int64). O(n)."""
    n = len(a)
    out = np.empty(n, np.int64)
    for i in range(n):
        out[i] = host_delay(host_router, router_dist, lan_us, a[i], b[i])
    return out


@numba.njit(cache=True)
def set_arrivals(m, host_router, router_dist, lan_us):
    """Each message record's ``time`` = ``sent`` + :func:`host_delay` (src, dst), in
    place: one pass over the records instead of two field copies, a latency array and a
    sum (``ShardContext.send``). O(n)."""
    for i in range(len(m)):
        m[i]["time"] = m[i]["sent"] + host_delay(host_router, router_dist, lan_us,
                                                 np.int64(m[i]["src"]), np.int64(m[i]["dst"]))


@numba.njit(cache=True, inline="always")
def put_send(out, j, src, dst, type_, sent, host_router, router_dist, lan_us):
    """Record ``j`` of ``out`` (zeroed rows of ``ShardContext.send_room``) becomes a send
    from ``src`` to ``dst``: type, sent and time = sent + :func:`host_delay` (src, dst),
    as ``ShardContext.send`` writes it; the caller sets the protocol's fields. O(1).
    Inlined, its arguments widened to int64 (exact): its ~25 callers pass int16, int32,
    int64 and literal codes, each a further compile of a kernel of its own."""
    _put_send(out, np.int64(j), np.int64(src), np.int64(dst), np.int64(type_),
              np.int64(sent), host_router, router_dist, lan_us)


@numba.njit(cache=True)
def _put_send(out, j, src, dst, type_, sent, host_router, router_dist, lan_us):
    r = out[j]
    r["src"] = src
    r["dst"] = dst
    r["type"] = type_
    r["sent"] = sent
    r["time"] = sent + host_delay(host_router, router_dist, lan_us, src, dst)


@numba.njit(cache=True)
def zero_rows(out, start, end):
    """Records start..end-1 of ``out`` zeroed (what ``SendBuffer.reserve`` does), as bytes:
    for a kernel lent rows that are not zeroed (``send_compiled(..., zeroed=False)``),
    before it writes them. O(end - start)."""
    if end > start:
        out[start:end].view(np.uint8)[:] = 0


TYPE_OFFSET = 32768   # a type code t (int16) is counted at t + TYPE_OFFSET


@numba.njit(cache=True)
def stamp_records(m, local_index, seq, n_nodes, now, sent_counts):
    """Check and stamp the records of a pass being sent, in place (``ShardEngine._route``):
    each gets its sender's next sequence number (the sender's counter advanced) and a
    ``time`` before ``now`` is raised to ``now``; ``sent_counts[type + TYPE_OFFSET]``
    counts them. Returns (rows raised to ``now``, first row sent from a node not on this
    shard or -1, first row sent to a node outside 0..n_nodes-1 or -1, the earliest time
    after stamping, whether every row is a hop (src != dst), whether a type was counted for
    the first time). On a bad row nothing is stamped or counted. O(n), no array made."""
    n = len(m)
    never = np.iinfo(np.int64).max
    for i in range(n):
        s = m[i]["src"]
        if s < 0 or s >= len(local_index) or local_index[s] < 0:
            return 0, i, -1, never, False, False
    for i in range(n):
        if m[i]["dst"] < 0 or m[i]["dst"] >= n_nodes:
            return 0, -1, i, never, False, False
    late = 0
    earliest = never
    all_hops = True
    new_type = False
    for i in range(n):
        r = m[i]
        li = local_index[r["src"]]
        r["seq"] = seq[li]
        seq[li] += 1
        if r["time"] < now:
            r["time"] = now
            late += 1
        if r["time"] < earliest:
            earliest = r["time"]
        if r["src"] == r["dst"]:
            all_hops = False
        t = np.int64(r["type"]) + TYPE_OFFSET
        if sent_counts[t] == 0:
            new_type = True
        sent_counts[t] += 1
    return late, -1, -1, earliest, all_hops, new_type


@numba.njit(cache=True)
def rows_by_shard(dst, node_shard, n_shards):
    """The rows of a pass grouped by the shard of their ``dst``, for ``ShardEngine._route``:
    (order: row indices, shard by shard and in row order within a shard; starts: shard s's
    rows are ``order[starts[s]:starts[s + 1]]``; the shards with rows, ascending). One
    compiled call where the numpy split (a gather, a compare per shard, a unique, a take
    per shard) would be several numpy calls per shard on every pass. O(rows + shards)."""
    n = len(dst)
    starts = np.zeros(n_shards + 1, np.int64)
    for i in range(n):
        starts[node_shard[dst[i]] + 1] += 1
    present = 0
    for s in range(n_shards):
        if starts[s + 1]:
            present += 1
        starts[s + 1] += starts[s]
    shards = np.empty(present, np.int64)
    j = 0
    for s in range(n_shards):
        if starts[s + 1] > starts[s]:
            shards[j] = s
            j += 1
    pos = starts[:-1].copy()
    order = np.empty(n, np.int64)
    for i in range(n):
        s = node_shard[dst[i]]
        order[pos[s]] = i
        pos[s] += 1
    return order, starts, shards


@numba.njit(cache=True)
def type_counts(types):
    """(distinct values in order of first appearance, count of each) of a batch's types,
    a handful of distinct ones: O(n x distinct), one call where np.unique sorts."""
    found = np.empty(len(types), np.int64)
    counts = np.zeros(len(types), np.int64)
    k = 0
    for i in range(len(types)):
        t = types[i]
        j = 0
        while j < k and found[j] != t:
            j += 1
        if j == k:
            found[k] = t
            k += 1
        counts[j] += 1
    return found[:k], counts[:k]


@numba.njit(cache=True)
def local_indices(local_index, g):
    """local_index[g] (int32), -1 where g is outside 0..len-1. O(n)."""
    n = len(local_index)
    out = np.empty(len(g), np.int32)
    for i in range(len(g)):
        x = g[i]
        out[i] = local_index[x] if 0 <= x < n else -1
    return out


@numba.njit(cache=True)
def compact_payload(pay_off, pay_len, payload):
    """Payload of taken rows packed in row order: rewrites ``pay_off`` in place (0 for
    every row when no row has payload) and returns the new flat payload. O(rows + taken)."""
    n = len(pay_off)
    total = 0
    for i in range(n):
        total += pay_len[i]
    out = np.empty(total, payload.dtype)
    _copy_segments(pay_off, pay_len, payload, out, 0)
    return out


@numba.njit(cache=True)
def _copy_segments(pay_off, pay_len, payload, out, pos):
    """Each row's segment of ``payload`` to ``out`` from ``pos`` on, in row order,
    ``pay_off`` pointed there (in place); returns the position after the last. O(rows +
    copied)."""
    for i in range(len(pay_off)):
        o = pay_off[i]
        ln = pay_len[i]
        for j in range(ln):
            out[pos + j] = payload[o + j]
        pay_off[i] = pos
        pos += ln
    return pos


@numba.njit(cache=True)
def unique_first(keys):
    """Unique-first, the one place it is written: (the distinct keys, sorted; the index of
    each one's first occurrence int64), what ``np.unique(keys, return_index=True)``
    returns, in one compiled pass (callers hold a handful of keys, where numpy's unique
    costs ~15 us). O(n log n)."""
    n = len(keys)
    idx = np.empty((2, n), np.int64)     # the order, then the first occurrences
    o, first = idx[0], idx[1]
    stable_order(keys, o)                # stable: a key's first occurrence first
    vals = np.empty(n, keys.dtype)
    u = 0
    for q in range(n):
        k = keys[o[q]]
        if q == 0 or k != vals[u - 1]:
            vals[u] = k
            first[u] = o[q]
            u += 1
    return vals[:u], first[:u]


# the longest key array :func:`stable_order` sorts by insertion
INSERTION_MAX = 32


@numba.njit(cache=True)
def stable_order(keys, out):
    """``np.argsort(keys, kind="mergesort")`` written to ``out`` (len(keys)): the indices
    of ``keys`` in ascending order, equal keys in their input order. Up to INSERTION_MAX
    keys by insertion, in place: the compiled kernels sort a handful of keys per call, and
    numba's sort makes arrays of its own at every call. O(n log n), O(n^2) up to
    INSERTION_MAX."""
    n = len(keys)
    if n > INSERTION_MAX:
        out[:] = np.argsort(keys, kind="mergesort")
        return
    for i in range(n):
        j = i
        while j > 0 and keys[out[j - 1]] > keys[i]:
            out[j] = out[j - 1]
            j -= 1
        out[j] = i


@numba.njit(cache=True)
def concat_rows(a, b):
    """Records ``a`` then ``b`` (one of them as it is when the other is empty: a handler's
    runs rarely both add rows). O(len(a) + len(b))."""
    if len(a) == 0:
        return b
    if len(b) == 0:
        return a
    out = np.empty(len(a) + len(b), a.dtype)
    for i in range(len(a)):
        out[i] = a[i]
    for i in range(len(b)):
        out[len(a) + i] = b[i]
    return out


@numba.njit(cache=True)
def sorted_distinct(a):
    """The distinct values of ``a``, sorted (``unique_first``'s keys, without the indices),
    in place: ``a`` is sorted and its distinct values moved to its front, which is
    returned (a view: no array made, for a kernel that calls it every pass). O(n log n)."""
    a.sort()
    u = 0
    for i in range(len(a)):
        if i == 0 or a[i] != a[u - 1]:
            a[u] = a[i]
            u += 1
    return a[:u]


@numba.njit(cache=True)
def pack_row(row, pool, pos):
    """Payload packing, the one place it is written: the non-negative entries of ``row``
    (a message's ids; -1 = none) into ``pool`` from ``pos`` on, in order. Returns the
    position after them. O(len(row))."""
    for j in range(len(row)):
        if row[j] >= 0:
            pool[pos] = row[j]
            pos += 1
    return pos


@numba.njit(cache=True)
def packed_size(rows):
    """How many ids :func:`pack_row` writes for all rows of an int matrix. O(rows.size)."""
    n, w = rows.shape
    total = 0
    for i in range(n):
        for j in range(w):
            if rows[i, j] >= 0:
                total += 1
    return total


@numba.njit(cache=True)
def pack_rows(rows):
    """The non-negative entries of each row of an int matrix, in row order: (payload
    int32, pay_off int64, pay_len int64) for ``ctx.send``. O(rows.size)."""
    n = rows.shape[0]
    payload = np.empty(packed_size(rows), np.int32)
    offs = np.zeros(n, np.int64)
    lens = np.zeros(n, np.int64)
    pack_rows_into(rows, offs, lens, payload, 0)
    return payload, offs, lens


@numba.njit(cache=True)
def pack_rows_into(rows, pay_off, pay_len, pool, used):
    """:func:`pack_rows` written straight into a send pool from ``used`` on: row i's
    non-negative entries become its segment, ``pay_off`` / ``pay_len`` set in place, as
    ``pack_rows`` then ``append_payload`` set them (offsets left 0 when no row has an
    entry). Returns the new cursor; -1 (nothing written) when ``pool`` lacks room.
    O(rows.size)."""
    need = packed_size(rows)
    if need == 0:
        return used
    if used + need > len(pool):
        return -1
    pos = used
    for i in range(rows.shape[0]):
        pay_off[i] = pos
        pos = pack_row(rows[i], pool, pos)
        pay_len[i] = pos - pay_off[i]
    return pos


@numba.njit(cache=True)
def payload_rows(pay_off, pay_len, payload, width):
    """Each row's payload segment as a row of an int64 matrix, -1 padded, cut at `width`
    columns (``batch.payload_rows``). O(rows * width)."""
    n = len(pay_off)
    out = np.full((n, width), -1, np.int64)
    for i in range(n):
        k = min(np.int64(pay_len[i]), width)
        o = pay_off[i]
        for j in range(k):
            out[i, j] = payload[o + j]
    return out


@numba.njit(cache=True, inline="always")
def _key_before(types, time, src, seq, a, b):
    """Row a's dispatch key (type, time, src, seq) is strictly below row b's."""
    if types[a] != types[b]:
        return types[a] < types[b]
    if time[a] != time[b]:
        return time[a] < time[b]
    if src[a] != src[b]:
        return src[a] < src[b]
    return seq[a] < seq[b]


_SORT_RUN = 32   # rows sorted by insertion before the merges
# above this many rows np.lexsort's four stable passes beat the merge sort's indirect,
# cache-missing comparisons; below it the merge sort is the faster of the two
SORT_MAX = 16384


@numba.njit(cache=True)
def dispatch_sort(types, time, src, seq):
    """``np.lexsort((seq, src, time, types))``: the stable order of the rows by (type,
    time, src, seq), as one compiled merge sort (runs of 32 rows by insertion, then
    bottom-up merges that take the right row only when its key is strictly below: rows
    with equal keys keep their order). O(n log n) comparisons, faster than lexsort up to
    ``SORT_MAX`` rows; it also lets the queue's pop sort in the same compiled call
    (``EventQueue.pop_cell``)."""
    n = len(types)
    order = np.arange(n)
    for lo in range(0, n, _SORT_RUN):
        hi = min(lo + _SORT_RUN, n)
        for i in range(lo + 1, hi):
            x = order[i]
            j = i
            while j > lo and _key_before(types, time, src, seq, x, order[j - 1]):
                order[j] = order[j - 1]
                j -= 1
            order[j] = x
    if n <= _SORT_RUN:
        return order
    a = order
    b = np.empty(n, np.int64)
    width = _SORT_RUN
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if _key_before(types, time, src, seq, a[j], a[i]):
                    b[k] = a[j]
                    j += 1
                else:
                    b[k] = a[i]
                    i += 1
                k += 1
            while i < mid:
                b[k] = a[i]
                i += 1
                k += 1
            while j < hi:
                b[k] = a[j]
                j += 1
                k += 1
        a, b = b, a
        width *= 2
    return a


@numba.njit(cache=True)
def run_bounds(values):
    """Start of every run of equal values, then len(values): [0, ..., n] (just [0] when
    empty). O(n)."""
    return _run_bounds_into(values, np.empty(len(values) + 1, np.int64))


@numba.njit(cache=True)
def _run_bounds_into(values, out):
    """:func:`run_bounds` written to ``out`` (room for len(values) + 1): its first
    part, a view. O(n)."""
    n = len(values)
    k = 0
    for i in range(n):
        if i == 0 or values[i] != values[i - 1]:
            out[k] = i
            k += 1
    out[k] = n
    return out[:k + 1]


@numba.njit(cache=True)
def cell_runs(types, dst, local_index, alive):
    """What the engine's dispatch needs of a cell, in one pass: (start of every run of
    equal ``types`` then len -- :func:`run_bounds` --, the local index int64 of every
    row's ``dst``, whether all those nodes are ``alive``). O(n)."""
    n = len(types)
    both = np.empty(2 * n + 1, np.int64)   # local indices, then the bounds: one allocation
    li = both[:n]
    bounds = _run_bounds_into(types, both[n:])
    all_alive = True
    for i in range(n):
        x = local_index[dst[i]]
        li[i] = x
        if not alive[x]:
            all_alive = False
    return bounds, li, all_alive


@numba.njit(cache=True)
def append_payload(pay_off, pay_len, payload, pool, used):
    """Copy each row's payload segment (``payload[pay_off:pay_off + pay_len]``) to
    ``pool`` from ``used`` on, in row order, and point ``pay_off`` there (in place; a row
    without payload gets the cursor, as ``compact_payload`` does). Returns the new cursor;
    -1 (nothing written) when ``pool`` lacks room, -2 when a segment lies outside
    ``payload``. O(rows + payload copied)."""
    n = len(pay_off)
    need = 0
    for i in range(n):
        o = pay_off[i]
        ln = pay_len[i]
        if ln < 0 or (ln > 0 and (o < 0 or o + ln > len(payload))):
            return -2
        need += ln
    if used + need > len(pool):
        return -1
    return _copy_segments(pay_off, pay_len, payload, pool, used)
