"""Whole handler passes compiled: a handler's work and its sends in one numba call.

A cell of sparse protocol traffic hands each handler a few messages, so a handler's glue
(numpy calls, kernel dispatches, ``ctx.send`` calls) would cost far more than its work. The
handlers here run as one call: they read the message records, change the node state
through :mod:`.kernels` (:func:`.kernels.learn`) and write their sends straight into the
rows the engine's ``ShardContext.send_compiled`` lends them
(:func:`emulator.kernels.put_send`: the arrival time of the engine's latency rule),
payload ids into its pool (:func:`emulator.kernels.pack_row`). The protocol digest test
checks a whole run.

Every kernel here ends with the arguments ``send_compiled`` appends (out, pool, cursor,
host_router, router_dist, lan_us) and returns its results followed by (rows written, new
pool cursor).
"""

from __future__ import annotations

import numba
import numpy as np

from emulator.kernels import (
    concat_rows,
    pack_row,
    packed_size,
    put_send,
    sorted_distinct,
    unique_first,
    zero_rows,
)
from emulator.rng import node_draw

from .kernels import (
    HERE_APP,
    HERE_OWN,
    ROUTE_LOG_DTYPE,
    acked_pending,
    forget_failed,
    hop_key,
    hops_due,
    insert_table,
    keepalive_heard,
    known_count,
    learn,
    newly_joined,
    random_known,
    route_log,
    route_step,
    row_contains,
    sender_and_payload,
    side_farthest,
    table_rows,
)
from .types import (
    ACK_TIMER,
    ANNOUNCE,
    FIRST_OWN,
    HOP_ACK,
    JOIN,
    JOIN_LEAFS,
    JOIN_NBRS,
    JOIN_REQ,
    JOIN_ROWS,
    JOIN_START,
    KA_TIMER,
    KEEPALIVE,
    LAST_OWN,
    LEAF_LOOKUP,
    LEAF_REFRESH,
    LEAF_REPLY,
    LEAF_REQ,
    ROW_REPLY,
    ROW_REQ,
    ROWS_REPLY,
    ROWS_REQ,
    Announce,
    HopAck,
    Join,
    JoinLeafs,
    JoinReq,
    JoinStart,
    KaTimer,
    Keepalive,
    LeafRefresh,
    RowReply,
    RowsReply,
    RowsReq,
)

# type-specific columns the kernels write (compile-time constants inside them)
_ANNOUNCER = Announce.announcer
_IN_LEAF_SET = Announce.in_leaf_set
_ROW = RowsReply.row
_ROW_ASKED = RowsReq.row
_INCARNATION = LeafRefresh.incarnation
_IS_REPLY = Keepalive.is_reply
_LOOKUPS_DONE = LeafRefresh.lookups_done
_TABLE_TICK = LeafRefresh.table_tick
_KA_INCARNATION = KaTimer.incarnation
_ROUTE_NODES = JoinLeafs.route_nodes
_JOINER = Join.joiner
_REQ_JOINER = JoinReq.joiner
_RETRIES = JoinReq.retries
_CONTACT = JoinStart.contact
_ATTEMPT = JoinStart.attempt
# the counters on_runs adds to (``counts``; the caller moves them to ``ctx.count``)
N_ROW_REQUESTS, N_ROW_REPAIRS, N_ROW_REPLY_RUNS, N_PRESUMED_FAILED, N_RUN_COUNTS = range(5)
ROW_ATTEMPTS = 8   # helpers asked per emptied slot before giving up (lazy: next use retries)
_SLOT_ROW = RowReply.row
_SLOT_COLUMN = RowReply.column
_SLOT_ENTRY = RowReply.entry
_ACKED_TYPE = HopAck.acked_type
_ACKED_HOPS = HopAck.acked_hops


@numba.njit(cache=True)
def _put_leaf_set(out, k, members, x, me, pool, pos):
    """Payload of send ``k``: node ``x``'s leaf-set members (-1 slots dropped) then ``me``
    (``kernels.rows_and`` packed as ``ctx.send_rows`` packs it). Returns the new cursor."""
    out[k]["pay_off"] = pos
    pos = pack_row(members[x], pool, pos)
    pool[pos] = me
    pos += 1
    out[k]["pay_len"] = pos - out[k]["pay_off"]
    return pos


@numba.njit(cache=True)
def on_announce(m, li, in_leaf_set, rt, members, heard, failed, nbr, nbr_keys, nbr_known,
                global_ids, ids_hi, ids_lo, b, half, hr, rdist, lan, req_type, reply_type,
                out, pool, cursor, s_hr, s_rdist, s_lan):
    """ANNOUNCE (``LeafSetMaintenance.on_announce``): each receiver ``li[i]`` learns of the
    announcer (tables, leaf set, neighbourhood set; out of its failed memory); an announcer
    that is now a new leaf-set member, or one that says the receiver is in its leaf set,
    gets the receiver's leaf set (LEAF_REPLY); a new member heard of through a third node
    (``in_leaf_set`` 1) is asked for its own (LEAF_REQ, sent first): it may know neighbours
    of the receiver that nobody else will tell it about. Returns (probes,
    distinct sorted li, changed, rows written, cursor). Room: 2 rows and l + 1 ids per
    message. O(learn + n * l)."""
    n = len(m)
    # the senders (contiguous: the layout learn's other callers pass), the times and the
    # senders as candidates, in one allocation
    columns = np.empty((3, n), np.int64)
    src, now = columns[0], columns[1]
    cand = columns[2].reshape((n, 1))
    for i in range(n):
        cand[i, 0] = src[i] = m[i]["src"]
        now[i] = m[i]["time"]
    probes, uli, changed, _added, _latest = learn(
        rt, members, heard, failed, nbr, nbr_keys, nbr_known, global_ids, li, cand, now,
        ids_hi, ids_lo, b, half, hr, rdist, lan, src, np.bool_(True), np.bool_(True))
    # whether each sender is a member; then, in place, whether it gets the leaf set
    answer = row_contains(members, li, src)
    k = np.int64(0)     # (not a literal 0: a further compile of each callee)
    for i in range(n):
        new_member = answer[i] and changed[np.searchsorted(uli, li[i])]
        answer[i] = new_member or in_leaf_set[i] == 1
        if new_member and in_leaf_set[i] == 1:
            put_send(out, k, m[i]["dst"], m[i]["src"], req_type, m[i]["time"], s_hr, s_rdist,
                     s_lan)
            k += 1
    pos = cursor
    for i in range(n):
        if answer[i]:
            put_send(out, k, m[i]["dst"], m[i]["src"], reply_type, m[i]["time"], s_hr,
                     s_rdist, s_lan)
            pos = _put_leaf_set(out, k, members, li[i], m[i]["dst"], pool, pos)
            k += 1
    return probes, uli, changed, k, pos


@numba.njit(cache=True)
def on_leaf_reply(m, payload, li, rt, members, heard, failed, nbr, nbr_keys, nbr_known,
                  global_ids, ids_hi, ids_lo, b, half, hr, rdist, lan, announce_type,
                  out, pool, cursor, s_hr, s_rdist, s_lan):
    """LEAF_REPLY (``LeafSetMaintenance.on_leaf_reply``): each receiver learns of the leaf
    set and its sender (tables and leaf set; the sender out of its failed memory) and
    announces itself (ANNOUNCE, in_leaf_set 1) to each member its leaf set gained, at its
    latest reply time of the cell. Returns (probes, distinct sorted li, changed, rows
    written, cursor). Room: l rows per distinct receiver. O(learn)."""
    n = len(m)
    cand = sender_and_payload(m, payload)
    now = np.empty(n, np.int64)
    senders = np.empty(n, np.int64)
    for i in range(n):
        now[i] = m[i]["time"]
        senders[i] = m[i]["src"]
    probes, uli, changed, added, latest = learn(
        rt, members, heard, failed, nbr, nbr_keys, nbr_known, global_ids, li, cand, now,
        ids_hi, ids_lo, b, half, hr, rdist, lan, senders, np.bool_(True), np.bool_(False))
    k = 0
    for r in range(len(uli)):
        if not changed[r]:
            continue    # (nothing added; ``added`` may have no rows then)
        me = global_ids[uli[r]]
        t = max(latest[r], 0)
        for c in range(added.shape[1]):
            if added[r, c] >= 0:
                put_send(out, k, me, added[r, c], announce_type, t, s_hr, s_rdist, s_lan)
                out[k][_ANNOUNCER] = me
                out[k][_IN_LEAF_SET] = 1
                k += 1
    return probes, uli, changed, k, cursor


@numba.njit(cache=True)
def on_leaf_req(m, li, members, failed, reply_type, out, pool, cursor, s_hr, s_rdist, s_lan):
    """LEAF_REQ (``LeafSetMaintenance.on_leaf_req``): the requester is alive (out of the
    receiver's failed memory); it gets the receiver's leaf set (LEAF_REPLY). Returns
    (rows written, cursor). Room: 1 row and l + 1 ids per message. O(n * (l + memory))."""
    n = len(m)
    senders = np.empty(n, np.int64)
    for i in range(n):
        senders[i] = m[i]["src"]
    forget_failed(failed, li, senders)
    pos = cursor
    for i in range(n):
        put_send(out, i, m[i]["dst"], m[i]["src"], reply_type, m[i]["time"], s_hr, s_rdist,
                 s_lan)
        pos = _put_leaf_set(out, i, members, li[i], m[i]["dst"], pool, pos)
    return n, pos


@numba.njit(cache=True)
def on_rows_req(m, li, rows_asked, rt, reply_type, out, pool, cursor, s_hr, s_rdist, s_lan):
    """ROWS_REQ (``JoinProtocol.on_rows_req``): the requester gets the receiver's routing
    table row ``rows_asked[i]`` (the last row where it asks past the end), its entries as
    payload and the row asked in the reply's ``row`` column; payload offsets as
    ``ctx.send_rows`` packs them (all left 0 when no row has an entry). Returns (rows
    written, cursor). Room: 1 row and 2^b ids per message. O(n * 2^b)."""
    n = len(m)
    nrows, width = rt.shape[1], rt.shape[2]
    rows = np.empty((n, width), rt.dtype)
    for i in range(n):
        r = min(rows_asked[i], nrows - 1)
        for d in range(width):
            rows[i, d] = rt[li[i], r, d]
        put_send(out, i, m[i]["dst"], m[i]["src"], reply_type, m[i]["time"], s_hr, s_rdist,
                 s_lan)
        out[i][_ROW] = rows_asked[i]
    return n, _pack_rows(out, np.int64(0), rows, pool, cursor)


@numba.njit(cache=True)
def _routed_here(m, li):
    """Every record routed (mode 1) and for a node of this shard."""
    for i in range(len(m)):
        if m[i]["mode"] != 1 or li[i] < 0:
            return False
    return True


@numba.njit(cache=True)
def _hop_on(out, k, r, nh, s_hr, s_rdist, s_lan):
    """Send ``k``: routed record ``r`` (at r.dst) one hop on to ``nh``, as
    ``Router._send_hop`` sends it (``kernels.hop_on``: src = the node it is at, hops + 1,
    path_us + latency, sent = its arrival here, seq and payload 0)."""
    out[k] = r
    put_send(out, k, r["dst"], nh, r["type"], r["time"], s_hr, s_rdist, s_lan)
    out[k]["hops"] = r["hops"] + 1
    out[k]["path_us"] = r["path_us"] + (out[k]["time"] - out[k]["sent"])
    out[k]["seq"] = 0
    out[k]["pay_off"] = 0
    out[k]["pay_len"] = 0


@numba.njit(cache=True)
def on_leaf_lookup(m, li, rt, members, nbr, ids_hi, ids_lo, b, lookup_type, own_lo, own_hi,
                   heard, failed, nbr_keys, nbr_known, global_ids, half, hr, rdist, lan,
                   reply_type, out, pool, cursor, s_hr, s_rdist, s_lan):
    """LEAF_LOOKUPs arriving over a hop, with no hop acknowledgements
    (``Router.receive`` -> ``step``, ``LeafSetMaintenance.deliver_lookup``): one routing
    step each; at the key's node the lookup is logged (route log rows, returned) and,
    when the origin is another node, that node learns of the origin (tables, leaf set)
    and sends it its leaf set (LEAF_REPLY, sent first); the others go one hop on.
    Returns (ok, route log rows, probes, distinct sorted li, changed, rows written,
    cursor); ok False -- nothing done -- when a record is not routed (mode 1) or not
    this shard's (the caller's general path handles or reports it). Room: 1 row and l + 1
    ids per message. O(routing step + learn)."""
    n = len(m)
    no_changed = np.empty(0, np.bool_)
    if not _routed_here(m, li):
        return False, np.empty(0, ROUTE_LOG_DTYPE), 0, li[:0], no_changed, 0, cursor
    nxt, kind, counts = route_step(m, li, rt, members, nbr, ids_hi, ids_lo, b, lookup_type,
                                   own_lo, own_hi)
    log = np.empty(counts[HERE_OWN] + counts[HERE_APP], ROUTE_LOG_DTYPE)
    route_log(m, kind, log)
    q = 0
    for i in range(n):
        if kind[i] <= HERE_APP and m[i]["type"] == lookup_type and m[i]["origin"] != m[i]["dst"]:
            q += 1
    probes, uli, changed = 0, li[:0], no_changed    # (views, not arrays of their own)
    k = np.int64(0)     # (not a literal 0: a further compile of each callee)
    pos = cursor
    if q:
        # the lookups' rows, their nodes, times and origins as candidates: one allocation
        columns = np.empty((4, q), np.int64)
        sel, lli, now = columns[0], columns[1], columns[2]
        cand = columns[3].reshape((q, 1))
        j = 0
        for i in range(n):
            if kind[i] <= HERE_APP and m[i]["type"] == lookup_type and \
                    m[i]["origin"] != m[i]["dst"]:
                sel[j] = i
                j += 1
        for j in range(q):
            lli[j] = li[sel[j]]
            cand[j, 0] = m[sel[j]]["origin"]
            now[j] = m[sel[j]]["time"]
        probes, uli, changed, _added, _latest = learn(
            rt, members, heard, failed, nbr, nbr_keys, nbr_known, global_ids, lli, cand, now,
            ids_hi, ids_lo, b, half, hr, rdist, lan, lli, np.bool_(False), np.bool_(False))
        for j in range(q):
            r = m[sel[j]]
            put_send(out, k, r["dst"], r["origin"], reply_type, r["time"], s_hr, s_rdist,
                     s_lan)
            pos = _put_leaf_set(out, k, members, lli[j], r["dst"], pool, pos)
            k += 1
    for i in range(n):
        if kind[i] > HERE_APP:
            _hop_on(out, k, m[i], nxt[i], s_hr, s_rdist, s_lan)
            k += 1
    return True, log, probes, uli, changed, k, pos


@numba.njit(cache=True)
def on_leaf_refresh(m, li, incarnation, inc_col, done_col, ids_hi, ids_lo, members, rt,
                    seed, draws, global_ids, lookup_type, refresh_type, period, until, rounds,
                    out, pool, cursor, s_hr, s_rdist, s_lan):
    """LEAF_REFRESH timers without table ticks, with no hop acknowledgements
    (``LeafSetMaintenance.on_leaf_refresh``): timers of a node's current incarnation route
    a LEAF_LOOKUP to its own id with a randomized first hop (``Router.route``: the first
    hop drawn from the node's leaf set and table with its next random draw) and set the
    next refresh (``schedule_refresh``: ``period`` later while that is <= ``until`` and,
    with ``rounds`` > 0, fewer than ``rounds`` lookups were made; the count rides in
    ``done_col``). Returns (ok, rows written, cursor); ok False -- nothing done, no draw
    taken -- when a node knows nobody (its lookup takes the router's general path).
    Room: 2 rows per timer. O(n * (l + table))."""
    n = len(m)
    keep = np.empty(n, np.int64)
    nk = 0
    for i in range(n):
        if inc_col[i] == incarnation[li[i]]:
            keep[nk] = i
            nk += 1
    kli = np.empty(nk, np.int64)
    u = np.empty(nk, np.float64)
    for j in range(nk):
        x = li[keep[j]]
        kli[j] = x
        earlier = 0   # a node listed twice draws its next two numbers
        for p in range(j):
            if kli[p] == x:
                earlier += 1
        u[j] = node_draw(seed, m[keep[j]]["dst"], draws[x] + earlier)
    first = random_known(members, rt, kli, u)
    for j in range(nk):
        if first[j] < 0:
            return False, 0, cursor
    for j in range(nk):
        draws[kli[j]] += 1
    for j in range(nk):
        r = m[keep[j]]
        x = r["dst"]
        put_send(out, j, x, first[j], lookup_type, r["time"], s_hr, s_rdist, s_lan)
        out[j]["key_hi"] = ids_hi[x]
        out[j]["key_lo"] = ids_lo[x]
        out[j]["origin"] = x
        out[j]["group"] = -1
        out[j]["mode"] = 1
        out[j]["hops"] = 1
        out[j]["path_us"] = out[j]["time"] - out[j]["sent"]
    k = nk
    if period:
        for j in range(nk):
            r = m[keep[j]]
            nxt = r["time"] + period
            done = done_col[keep[j]] + 1
            if nxt <= until and (rounds <= 0 or done < rounds):
                x = r["dst"]
                out[k]["src"] = x
                out[k]["dst"] = x
                out[k]["type"] = refresh_type
                out[k]["time"] = nxt
                out[k]["sent"] = nxt
                out[k][_INCARNATION] = incarnation[kli[j]]
                if rounds > 0:
                    out[k][_LOOKUPS_DONE] = done
                k += 1
    return True, k, cursor


@numba.njit(cache=True)
def _all_know_someone(m, li, incarnation, members, rt):
    """Whether every LEAF_REFRESH of ``m`` of its node's current incarnation has a node
    that knows somebody (leaf set or table): its lookup's randomized first hop exists
    (:func:`on_leaf_refresh` declines otherwise). O(n * (l + rows * 2^b))."""
    for i in range(len(m)):
        x = li[i]
        if m[i][_INCARNATION] == incarnation[x] and known_count(members, rt, x) == 0:
            return False
    return True


@numba.njit(cache=True)
def _rows_known(rt, x):
    """How many rows of node ``x``'s routing table hold an entry (a table tick's
    ROWS_REQs). O(rows * 2^b)."""
    n = 0
    for r in range(rt.shape[1]):
        for d in range(rt.shape[2]):
            if rt[x, r, d] >= 0:
                n += 1
                break
    return n


@numba.njit(cache=True)
def table_ticks(m, li, sel, rt, seed, draws, global_ids, incarnation, rows_req_type,
                refresh_type, table_us, until, out, k, s_hr, s_rdist, s_lan):
    """Routing-table maintenance ticks: the rows ``sel`` of LEAF_REFRESH timers ``m``
    (``table_tick`` 1, their node's current incarnation; ``LeafSetMaintenance.
    maintain_table``). Each node asks one entry of each non-empty row r of its table,
    drawn uniformly with its next random draw, for its row r (ROWS_REQ; ticks in row
    order, rows ascending), then each node's next tick ``table_us`` later while that is
    <= ``until`` (``schedule_table_maintenance``). From row k of out on (zeroed); returns
    the next row. Room: rows + 1 per tick. O(n * rows * 2^b)."""
    nrows, width = rt.shape[1], rt.shape[2]
    for i in range(len(m)):
        if not sel[i]:
            continue
        x = li[i]
        me = global_ids[x]
        for r in range(nrows):
            count = 0
            for d in range(width):
                count += rt[x, r, d] >= 0
            if count == 0:
                continue
            pick = np.int64(np.floor(node_draw(seed, me, draws[x]) * count))
            draws[x] += 1
            seen = 0
            for d in range(width):
                if rt[x, r, d] >= 0:
                    if seen == pick:
                        put_send(out, k, me, rt[x, r, d], rows_req_type, m[i]["time"], s_hr,
                                 s_rdist, s_lan)
                        out[k][_ROW_ASKED] = r
                        k += 1
                        break
                    seen += 1
    for i in range(len(m)):
        if sel[i] and m[i]["time"] + table_us <= until:
            k = _timer(out, k, global_ids[li[i]], m[i]["time"] + table_us, refresh_type)
            out[k - 1][_TABLE_TICK] = 1
            out[k - 1][_INCARNATION] = incarnation[li[i]]
    return k


@numba.njit(cache=True)
def on_table_ticks(m, li, rt, seed, draws, global_ids, incarnation, rows_req_type,
                   refresh_type, table_us, until, out, pool, cursor, s_hr, s_rdist, s_lan):
    """:func:`table_ticks` for every row of ``m`` (``maintain_table``'s call), lent
    zeroed rows. Returns (rows written, cursor)."""
    k = table_ticks(m, li, np.ones(len(m), np.bool_), rt, seed, draws, global_ids,
                    incarnation, rows_req_type, refresh_type, table_us, until, out,
                    np.int64(0), s_hr, s_rdist, s_lan)
    return k, cursor


@numba.njit(cache=True)
def on_rows_reply(m, payload, li, rt, failed, global_ids, ids_hi, ids_lo, b, hr, rdist, lan,
                  out, pool, cursor, s_hr, s_rdist, s_lan):
    """ROWS_REPLY (``JoinProtocol.on_rows_reply``): the row and its sender offered to the
    receiver's routing table only (probes; its failed ids left out). Sends nothing.
    Returns (probes, 0, cursor). O(n * 2^b)."""
    cand = sender_and_payload(m, payload)
    probes = insert_table(rt, li, global_ids, cand, ids_hi, ids_lo, b, hr, rdist, lan, failed)
    return probes, 0, cursor


@numba.njit(cache=True)
def joined(li, t, members, rt, nbr, heard, global_ids, incarnation, announce_type,
           keepalive_us, ka_type, refresh_us, refresh_until, refresh_rounds, refresh_type,
           table_us, exchange_rows, rows_req_type, out, pool, cursor, s_hr, s_rdist, s_lan):
    """Nodes ``li`` (distinct, sorted) that just joined at times ``t``
    (``JoinProtocol._maybe_joined`` after its count), their sends in its order: an
    ANNOUNCE to every node each knows (leaf set, table, neighbourhood set; in id order per
    node; in_leaf_set 1 for its leaf-set members: "you are in my leaf set", so they always
    answer with theirs and a joiner that got a stale leaf set walks to its true
    neighbours); with keep-alives, the clocks set and
    the first KA_TIMER; the first LEAF_REFRESH (``schedule_refresh``, no lookup made yet)
    and table-maintenance tick (``schedule_table_maintenance``) while before
    ``refresh_until``; a ROWS_REQ to each entry of the top ``exchange_rows`` table rows
    (the second join stage, row-major). Returns (rows written, cursor). Room: l + rows * 2^b
    + m + 3 + exchange_rows * 2^b rows per node. O(n * (known log known))."""
    n = len(li)
    nl, nrows, width, nm = members.shape[1], rt.shape[1], rt.shape[2], nbr.shape[1]
    ids = np.empty(nl + nrows * width + nm, np.int64)
    k = np.int64(0)     # (not a literal 0: a further compile of each callee)
    for q in range(n):
        x = li[q]
        me = global_ids[x]
        c = 0
        for j in range(nl):
            if members[x, j] >= 0:
                ids[c] = members[x, j]
                c += 1
        for r in range(nrows):
            for d in range(width):
                if rt[x, r, d] >= 0:
                    ids[c] = rt[x, r, d]
                    c += 1
        for j in range(nm):
            if nbr[x, j] >= 0:
                ids[c] = nbr[x, j]
                c += 1
        srt = np.sort(ids[:c])
        for p in range(c):
            v = srt[p]
            if p > 0 and v == srt[p - 1]:
                continue
            put_send(out, k, me, v, announce_type, t[q], s_hr, s_rdist, s_lan)
            out[k][_ANNOUNCER] = me
            for j in range(nl):
                if members[x, j] == v:
                    out[k][_IN_LEAF_SET] = 1
                    break
            k += 1
    if keepalive_us:
        for q in range(n):
            for j in range(heard.shape[1]):
                heard[li[q], j] = t[q]
        for q in range(n):
            k = _timer(out, k, global_ids[li[q]], t[q] + keepalive_us, ka_type)
            out[k - 1][_KA_INCARNATION] = incarnation[li[q]]
    if refresh_us:
        for q in range(n):
            if t[q] + refresh_us <= refresh_until:
                k = _timer(out, k, global_ids[li[q]], t[q] + refresh_us, refresh_type)
                out[k - 1][_INCARNATION] = incarnation[li[q]]
                # (lookups_done 0 when bounded: the zeroed record's)
    if table_us:
        for q in range(n):
            if t[q] + table_us <= refresh_until:
                k = _timer(out, k, global_ids[li[q]], t[q] + table_us, refresh_type)
                out[k - 1][_TABLE_TICK] = 1
                out[k - 1][_INCARNATION] = incarnation[li[q]]
    top = min(exchange_rows, nrows)
    for q in range(n):
        me = global_ids[li[q]]
        for r in range(top):
            for d in range(width):
                v = rt[li[q], r, d]
                if v >= 0:
                    put_send(out, k, me, v, rows_req_type, t[q], s_hr, s_rdist, s_lan)
                    out[k][_ROW] = r
                    k += 1
    return k, cursor


@numba.njit(cache=True)
def _timer(out, k, node, at, type_):
    """Record ``k`` becomes a timer of ``node`` at ``at`` (``ShardContext.timer``: src =
    dst = node, time = sent = at); returns k + 1."""
    out[k]["src"] = node
    out[k]["dst"] = node
    out[k]["type"] = type_
    out[k]["time"] = at
    out[k]["sent"] = at
    return k + 1


@numba.njit(cache=True)
def _pack_rows(out, k0, rows, pool, pos):
    """Payload of sends k0.. k0 + len(rows) - 1: row i's non-negative entries each, as
    ``ctx.send_rows`` packs one call's rows (offsets left 0 when no row has an entry).
    Returns the new cursor."""
    if packed_size(rows) == 0:
        return pos
    for i in range(rows.shape[0]):
        out[k0 + i]["pay_off"] = pos
        pos = pack_row(rows[i], pool, pos)
        out[k0 + i]["pay_len"] = pos - out[k0 + i]["pay_off"]
    return pos


@numba.njit(cache=True)
def _send_table_rows(m, sel, li, to, table, type_, out, k, pool, pos, s_hr, s_rdist, s_lan):
    """Sends k.. (one ``ctx.send_rows`` call): from the node of each record ``sel[j]`` to
    ``to[sel[j]]``, carrying the node's row of ``table`` (its leaf set or neighbourhood
    set). Returns (k, cursor)."""
    n = len(sel)
    rows = np.empty((n, table.shape[1]), table.dtype)
    for j in range(n):
        r = m[sel[j]]
        for c in range(table.shape[1]):
            rows[j, c] = table[li[sel[j]], c]
        put_send(out, k + j, r["dst"], to[sel[j]], type_, r["time"], s_hr, s_rdist, s_lan)
    return k + n, _pack_rows(out, k, rows, pool, pos)


@numba.njit(cache=True)
def _join_rows(m, sel, li, joiner, rt, ids_hi, ids_lo, b, rows_type, out, k, pool, pos,
               s_hr, s_rdist, s_lan):
    """JOIN_ROWS from the nodes of JOINs ``sel`` to their joiners: each node's rows
    0..spl (``JoinProtocol._send_rows``, one send call). Returns (k, cursor)."""
    n = len(sel)
    lli = np.empty(n, np.int64)
    mine = np.empty(n, np.int64)
    them = np.empty(n, np.int64)
    for j in range(n):
        lli[j] = li[sel[j]]
        mine[j] = m[sel[j]]["dst"]
        them[j] = joiner[sel[j]]
    rows = table_rows(rt, lli, mine, them, ids_hi, ids_lo, b)
    for j in range(n):
        put_send(out, k + j, mine[j], them[j], rows_type, m[sel[j]]["time"], s_hr, s_rdist,
                 s_lan)
    return k + n, _pack_rows(out, k, rows, pool, pos)


@numba.njit(cache=True)
def on_join(m, li, joiner, rt, members, nbr, ids_hi, ids_lo, b, lookup_type, own_lo, own_hi,
            rows_type, leafs_type, out, pool, cursor, s_hr, s_rdist, s_lan):
    """JOINs arriving over a hop, with no hop acknowledgements (``Router.receive`` ->
    ``step``, ``JoinProtocol.deliver`` / ``forward``): :func:`_route_joins`. Returns (ok,
    route log rows, rows written, cursor); ok False -- nothing done -- when a record is
    not routed (mode 1) or not this shard's. Room: 3 rows and rows * 2^b + l ids per
    message. O(routing step + n * rows * 2^b)."""
    if not _routed_here(m, li):
        return False, np.empty(0, ROUTE_LOG_DTYPE), 0, cursor
    log, k, pos = _route_joins(m, li, joiner, rt, members, nbr, ids_hi, ids_lo, b,
                               lookup_type, own_lo, own_hi, rows_type, leafs_type, out,
                               np.int64(0), pool, cursor, s_hr, s_rdist, s_lan)
    return True, log, k, pos


@numba.njit(cache=True)
def _route_joins(m, li, joiner, rt, members, nbr, ids_hi, ids_lo, b, lookup_type, own_lo,
                 own_hi, rows_type, leafs_type, out, k, pool, pos, s_hr, s_rdist, s_lan):
    """One routing step of JOIN records ``m`` at their nodes ``li`` (``Router.step`` with
    ``JoinProtocol.deliver`` / ``forward``): at Z, the node closest to the joiner, the
    JOIN is logged (route log rows, returned) and Z sends the joiner its rows (JOIN_ROWS)
    and its leaf set with the route's node count (JOIN_LEAFS); a node passed on the way
    sends its rows, and the JOIN goes one hop on. Sends from ``k`` on, in the router's
    order: Z's rows, Z's leaf sets, the passed nodes' rows, the hops. Returns (route log
    rows, k, cursor)."""
    n = len(m)
    nxt, kind, counts = route_step(m, li, rt, members, nbr, ids_hi, ids_lo, b, lookup_type,
                                   own_lo, own_hi)
    n_here = counts[HERE_OWN] + counts[HERE_APP]
    log = np.empty(n_here, ROUTE_LOG_DTYPE)
    route_log(m, kind, log)
    here = np.empty(n_here, np.int64)
    on = np.empty(n - n_here, np.int64)
    h = 0
    o = 0
    for i in range(n):
        if kind[i] <= HERE_APP:
            here[h] = i
            h += 1
        else:
            on[o] = i
            o += 1
    if n_here:
        k, pos = _join_rows(m, here, li, joiner, rt, ids_hi, ids_lo, b, rows_type, out, k,
                            pool, pos, s_hr, s_rdist, s_lan)
        k0 = k
        k, pos = _send_table_rows(m, here, li, joiner, members, leafs_type, out, k, pool, pos,
                                  s_hr, s_rdist, s_lan)
        for j in range(n_here):
            out[k0 + j][_ROUTE_NODES] = m[here[j]]["hops"] + 1
    if len(on):
        k, pos = _join_rows(m, on, li, joiner, rt, ids_hi, ids_lo, b, rows_type, out, k,
                            pool, pos, s_hr, s_rdist, s_lan)
        for j in range(len(on)):
            _hop_on(out, k, m[on[j]], nxt[on[j]], s_hr, s_rdist, s_lan)
            k += 1
    return log, k, pos


@numba.njit(cache=True)
def on_join_req(m, li, joined, joiner_col, retries_col, max_retries, retry_us, rt, members,
                nbr, ids_hi, ids_lo, b, lookup_type, own_lo, own_hi, req_type, nbrs_type,
                join_type, rows_type, leafs_type, acks_off, pending, deadline, identity, count,
                slack_us, out, pool, cursor, s_hr, s_rdist, s_lan):
    """JOIN_REQ at contact A (``JoinProtocol.on_join_req``): a contact not joined yet
    holds the request (a JOIN_REQ timer ``retry_us`` later, retries + 1) while under
    ``max_retries``; the others send the joiner their neighbourhood set (JOIN_NBRS) and
    route its JOIN from here (``Router.route``: :func:`_route_joins` on the new JOIN
    records); with hop acknowledgements (``acks_off`` false) the hops sent wait for theirs
    (:func:`_expect_run_hops` on ``HopAcks.loop_inputs``, which have room for a hop per
    message). Returns (route log rows, rows written, cursor). Room: 4 rows (5 with
    acknowledgements) and m + rows * 2^b + l ids per message."""
    n = len(m)
    k = np.int64(0)     # (not a literal 0: a further compile of each callee)
    go = np.empty(n, np.int64)
    ng = 0
    for i in range(n):
        if not joined[li[i]] and retries_col[i] < max_retries:
            r = m[i]
            k = _timer(out, k, np.int64(r["dst"]), r["time"] + retry_us, req_type)
            out[k - 1][_REQ_JOINER] = joiner_col[i]
            out[k - 1][_RETRIES] = retries_col[i] + 1
        else:
            go[ng] = i
            ng += 1
    if ng == 0:
        return np.empty(0, ROUTE_LOG_DTYPE), k, cursor
    k, pos = _send_table_rows(m, go[:ng], li, joiner_col, nbr, nbrs_type, out, k, pool,
                              cursor, s_hr, s_rdist, s_lan)
    joins = np.zeros(ng, m.dtype)
    gli = np.empty(ng, np.int64)
    gx = np.empty(ng, np.int64)
    for j in range(ng):
        r = m[go[j]]
        x = joiner_col[go[j]]
        a = r["dst"]
        joins[j]["src"] = a
        joins[j]["dst"] = a
        joins[j]["time"] = r["time"]
        joins[j]["sent"] = r["time"]
        joins[j]["type"] = join_type
        joins[j]["key_hi"] = ids_hi[x]
        joins[j]["key_lo"] = ids_lo[x]
        joins[j]["origin"] = x
        joins[j]["group"] = -1
        joins[j][_JOINER] = x
        joins[j]["mode"] = 1
        gli[j] = li[go[j]]
        gx[j] = x
    log, k, pos = _route_joins(joins, gli, gx, rt, members, nbr, ids_hi, ids_lo, b,
                               lookup_type, own_lo, own_hi, rows_type, leafs_type, out, k, pool,
                               pos, s_hr, s_rdist, s_lan)
    if not acks_off:
        k = _expect_run_hops(out, np.int64(0), k, slack_us, pending, deadline, identity, count)
    return log, k, pos


# the join pieces a joiner waits for (on_join_piece's ``piece``)
PIECE_ROWS, PIECE_NBRS, PIECE_LEAFS = 0, 1, 2


@numba.njit(cache=True)
def on_join_piece(m, payload, li, piece, route_nodes, rt, members, heard, failed, nbr,
                  nbr_keys, nbr_known, global_ids, ids_hi, ids_lo, b, half, hr, rdist, lan,
                  joined, nbrs_got, rows_expected, rows_got, out, pool, cursor, s_hr,
                  s_rdist, s_lan):
    """JOIN_ROWS, JOIN_NBRS or JOIN_LEAFS at the joiner (``JoinProtocol.on_join_rows`` /
    ``on_join_nbrs`` / ``on_join_leafs``): it learns of the ids and their sender (and, for
    a neighbourhood set, into its own), counts the piece (rows: one more; nbrs: got;
    leafs: the route's node count ``route_nodes[i]`` expected), and the joiners that now
    have every piece are marked joined (``kernels.newly_joined``). Sends nothing; returns
    (probes, distinct sorted li, changed, newly joined li, their times, 0, cursor)."""
    n = len(m)
    cand = sender_and_payload(m, payload)
    now = np.empty(n, np.int64)
    for i in range(n):
        now[i] = m[i]["time"]
    probes, uli, changed, _added, _latest = learn(
        rt, members, heard, failed, nbr, nbr_keys, nbr_known, global_ids, li, cand, now,
        ids_hi, ids_lo, b, half, hr, rdist, lan, li, np.bool_(False), piece == PIECE_NBRS)
    for i in range(n):
        if piece == PIECE_ROWS:
            rows_got[li[i]] += 1
        elif piece == PIECE_NBRS:
            nbrs_got[li[i]] = True
        else:
            rows_expected[li[i]] = route_nodes[i]
    jli, jt = newly_joined(li, now, joined, nbrs_got, rows_expected, rows_got)
    return probes, uli, changed, jli, jt, 0, cursor


@numba.njit(cache=True)
def on_join_start(m, contact, attempt, req_type, out, pool, cursor, s_hr, s_rdist, s_lan):
    """JOIN_START of first joins that have a contact (``JoinProtocol.on_join_start``'s
    common case): each joiner asks its contact to route its join (JOIN_REQ). Returns (ok,
    rows written, cursor); ok False -- nothing sent -- when a row is a rejoin attempt or
    has no contact (the first node): the handler's general path takes the batch. Room: 1
    row per message. O(n)."""
    n = len(m)
    for i in range(n):
        if attempt[i] > 0 or contact[i] < 0:
            return False, 0, cursor
    for i in range(n):
        x = m[i]["dst"]
        put_send(out, i, x, contact[i], req_type, m[i]["time"], s_hr, s_rdist, s_lan)
        out[i][_REQ_JOINER] = x
    return True, n, cursor


@numba.njit(cache=True)
def on_ka_timer(m, li, incarnation, members, heard, joined, global_ids, half, timeout_us,
                check_silent, keepalive_us, req_type, keepalive_type, timer_type, out, pool,
                cursor, s_hr, s_rdist, s_lan):
    """KA_TIMER (``LeafSetMaintenance.on_ka_timer``). With ``check_silent``, only when no
    leaf has been silent longer than ``timeout_us`` (else nothing is written and ok is
    False: the handler presumes those failed, then calls again without the check). Timers
    of an old incarnation are void. Each node whose
    leaf-set side holds fewer than ``half`` members but at least one asks the farthest for
    its leaf set (LEAF_REQ; the smaller side's requests first, then the larger's), sends a
    KEEPALIVE to every member (row by row, slot order) and sets its next timer. Returns
    (ok, rows written, cursor). Room: l + 3 rows per message. O(n * l)."""
    n = len(m)
    w = members.shape[1]
    rows = np.empty(n, np.int64)
    k = 0
    for i in range(n):
        if m[i][_KA_INCARNATION] == incarnation[li[i]]:
            rows[k] = i
            k += 1
    for j in range(k if check_silent else 0):
        i = rows[j]
        x = li[i]
        t = m[i]["time"]
        for c in range(w):
            if members[x, c] >= 0 and heard[x, c] < t - timeout_us:
                return False, 0, cursor
    o = 0
    for lo, hi in ((0, half), (half, w)):
        for j in range(k):
            i = rows[j]
            x = li[i]
            if not joined[x]:
                continue
            n_ok, far = side_farthest(members, x, lo, hi)
            if 0 < n_ok < half:
                put_send(out, o, m[i]["dst"], far, req_type, m[i]["time"], s_hr, s_rdist,
                         s_lan)
                o += 1
    for j in range(k):
        i = rows[j]
        x = li[i]
        for c in range(w):
            if members[x, c] >= 0:
                put_send(out, o, m[i]["dst"], members[x, c], keepalive_type, m[i]["time"],
                         s_hr, s_rdist, s_lan)
                o += 1
    for j in range(k):
        i = rows[j]
        g = m[i]["dst"]
        put_send(out, o, g, g, timer_type, m[i]["time"] + keepalive_us, s_hr, s_rdist, s_lan)
        out[o][_KA_INCARNATION] = incarnation[li[i]]
        o += 1
    return True, o, cursor


@numba.njit(cache=True)
def senders_heard(m, li, failed):
    """Messages ``m`` came straight from their senders, so each receiver (local index
    ``li``) knows its sender is alive: out of its failed memory (``PastryNodes.heard_from``).
    Returns (li, senders) as int64. O(n * memory)."""
    n = len(m)
    lil = np.empty(n, np.int64)
    senders = np.empty(n, np.int64)
    for i in range(n):
        lil[i] = li[i]
        senders[i] = m[i]["src"]
    forget_failed(failed, lil, senders)
    return lil, senders


@numba.njit(cache=True)
def keepalives_heard(m, li, failed, members, heard):
    """KEEPALIVE's state changes (``LeafSetMaintenance.on_keepalive`` before it answers):
    each sender is alive (out of the receiver's failed memory), and every leaf-set slot
    holding it has ``heard`` raised to the message's time. Returns the mask of rows whose
    sender is in no slot of the receiver (a stranger). O(n * (l + memory))."""
    lil, senders = senders_heard(m, li, failed)
    now = np.empty(len(m), np.int64)
    for i in range(len(m)):
        now[i] = m[i]["time"]
    return keepalive_heard(members, heard, lil, senders, now)


@numba.njit(cache=True)
def on_keepalive(m, li, rt, members, heard, failed, nbr, nbr_keys, nbr_known, global_ids,
                 ids_hi, ids_lo, b, half, hr, rdist, lan, keepalive_type, out, pool, cursor,
                 s_hr, s_rdist, s_lan):
    """KEEPALIVE (``LeafSetMaintenance.on_keepalive``) whole: :func:`keepalives_heard`;
    then the receivers of keep-alives from strangers (senders in none of their leaf-set
    slots) learn of them (``PastryNodes.learn``: no failed memory cleared again, no
    neighbourhood set), and a stranger the receiver still does not list, whose keep-alive
    was not itself a reply, gets one (is_reply 1), in row order. Returns (probes, distinct
    sorted li, changed, rows written, cursor). Room: one row per message. O(n * (l +
    memory) + learn)."""
    stranger = keepalives_heard(m, li, failed, members, heard)
    n_s = 0
    for i in range(len(m)):
        n_s += stranger[i]
    if n_s == 0:
        return 0, np.empty(0, np.int64), np.empty(0, np.bool_), 0, cursor
    sli = np.empty(n_s, np.int64)
    cand = np.empty((n_s, 1), np.int64)
    src = np.empty(n_s, np.int64)
    now = np.empty(n_s, np.int64)
    j = 0
    for i in range(len(m)):
        if stranger[i]:
            sli[j] = li[i]
            cand[j, 0] = src[j] = m[i]["src"]
            now[j] = m[i]["time"]
            j += 1
    probes, uli, changed, added, latest = learn(
        rt, members, heard, failed, nbr, nbr_keys, nbr_known, global_ids, sli, cand, now,
        ids_hi, ids_lo, b, half, hr, rdist, lan, sli, np.bool_(False), np.bool_(False))
    listed = row_contains(members, sli, src)
    k = 0
    j = 0
    for i in range(len(m)):
        if stranger[i]:
            if not listed[j] and m[i][_IS_REPLY] == 0:
                put_send(out, k, m[i]["dst"], m[i]["src"], keepalive_type, m[i]["time"],
                         s_hr, s_rdist, s_lan)
                out[k][_IS_REPLY] = 1
                k += 1
            j += 1
    return probes, uli, changed, k, cursor


@numba.njit(cache=True)
def on_row_req(m, li, failed, rt, reply_type, out, pool, cursor, s_hr, s_rdist, s_lan):
    """ROW_REQ (``TableRepair.on_row_req``): the asker is alive (out of the receiver's
    failed memory) and gets the receiver's entry of the slot (row, column) asked for -- -1
    for none, and for the asker itself (it sits in its own slot only by prefix accident)
    --, with the attempt number (``hops``) carried back. Returns (rows written, cursor).
    Room: 1 row per message. O(n * memory)."""
    n = len(m)
    lil, senders = senders_heard(m, li, failed)
    for i in range(n):
        r = m[i]
        row = r[_SLOT_ROW]
        col = r[_SLOT_COLUMN]
        entry = np.int64(rt[lil[i], row, col])
        if entry == senders[i]:
            entry = -1
        put_send(out, i, r["dst"], r["src"], reply_type, r["time"], s_hr, s_rdist, s_lan)
        out[i][_SLOT_ROW] = row
        out[i][_SLOT_COLUMN] = col
        out[i][_SLOT_ENTRY] = entry
        out[i]["hops"] = r["hops"]
    return n, cursor


@numba.njit(cache=True)
def ask_rows(li, row, col, attempt, t, rt, global_ids, req_type, out, pool, cursor, s_hr,
             s_rdist, s_lan):
    """ROW_REQ for the slot (``row``, ``col``) of local nodes ``li`` still empty, to their
    ``attempt``-th helper (0 the first; :data:`ROW_ATTEMPTS` at most): the live entries of
    the same row, other columns, then those of the next rows, in slot order (any of them
    shares the slot's prefix), the attempt carried as ``hops``; a node without such a
    helper asks nobody (:func:`presume_failed`, :func:`on_row_reply`). Returns (requests
    sent, rows written, cursor). Room: 1 row per slot. O(n * rows * 2^b)."""
    width = rt.shape[2]
    slots = rt.shape[1] * width
    k = 0
    for i in range(len(li)):
        x = li[i]
        if rt[x, row[i], col[i]] >= 0 or attempt[i] >= ROW_ATTEMPTS:
            continue
        seen = 0
        helper = -1
        for s in range(row[i] * width, slots):
            e = rt[x, s // width, s % width]
            if e >= 0:
                if seen == attempt[i]:
                    helper = e
                    break
                seen += 1
        if helper < 0:
            continue
        put_send(out, k, global_ids[x], helper, req_type, t[i], s_hr, s_rdist, s_lan)
        out[k][_SLOT_ROW] = row[i]
        out[k][_SLOT_COLUMN] = col[i]
        out[k]["hops"] = attempt[i]
        k += 1
    return k, k, cursor


@numba.njit(cache=True)
def presume_failed(li, dead, t, rt, members, heard, failed, failed_next, nbr, nbr_known,
                   global_ids, half, max_requests, req_type, counts, out, pool, cursor, s_hr,
                   s_rdist, s_lan):
    """Local nodes ``li`` presume ``dead`` failed at times ``t`` (``TableRepair``): one
    presumption per (node, dead id), its first, none where the node already knows of that
    death; the dead id enters the node's failed memory (the slot after its last, the
    memory's slot taken for all of a call's presumptions at a node before any is written:
    the last one written stays) and leaves its leaf set (each side closed up, nearest
    first, the keep-alive clocks moved along), its neighbourhood set and its routing
    table, whose slots so emptied ask their first helper (:func:`ask_rows`, counted in
    ``counts[N_ROW_REQUESTS]``). Returns (the nodes whose leaf set lost a member, distinct
    and sorted; rows written; cursor), or (no nodes, -1, cursor) with nothing done where
    more than ``max_requests`` slots would ask (the room the caller has). Room:
    ``max_requests`` rows. O(n log n + n * (memory + l + nbrs + rows * 2^b))."""
    n = len(li)
    key = np.empty(n, np.int64)
    for i in range(n):
        key[i] = li[i] * (np.int64(1) << 32) + dead[i]
    _, first = unique_first(key)
    first.sort()
    mem = failed.shape[1]
    rows = rt.shape[1]
    width = rt.shape[2]
    first_li = li[first]
    first_dead = dead[first]
    known = row_contains(failed, first_li, first_dead)
    pl = np.empty(len(first), np.int64)
    pd = np.empty(len(first), np.int64)
    pt = np.empty(len(first), np.int64)
    m = 0
    for q in range(len(first)):
        if not known[q]:
            pl[m] = first_li[q]
            pd[m] = first_dead[q]
            pt[m] = t[first[q]]
            m += 1
    in_leaf = row_contains(members, pl[:m], pd[:m])
    # the slots holding each dead id, in (presumption, row, column) order
    s_li = np.empty(max_requests, np.int64)
    s_row = np.empty(max_requests, np.int64)
    s_col = np.empty(max_requests, np.int64)
    s_t = np.empty(max_requests, np.int64)
    n_s = 0
    for i in range(m):
        for r in range(rows):
            for c in range(width):
                if rt[pl[i], r, c] == pd[i]:
                    if n_s == max_requests:
                        return np.empty(0, np.int64), np.int64(-1), cursor
                    s_li[n_s] = pl[i]
                    s_row[n_s] = r
                    s_col[n_s] = c
                    s_t[n_s] = pt[i]
                    n_s += 1
    cols = np.empty(m, np.int64)
    for i in range(m):
        cols[i] = failed_next[pl[i]] % mem
    for i in range(m):
        failed[pl[i], cols[i]] = pd[i]
    for i in range(m):
        failed_next[pl[i]] += 1
    for i in range(m):
        x = pl[i]
        for c in range(members.shape[1]):
            if members[x, c] == pd[i]:
                members[x, c] = -1
        for c in range(nbr.shape[1]):
            if nbr[x, c] == pd[i]:
                nbr[x, c] = -1
                nbr_known[x] = False
        for r in range(rows):
            for c in range(width):
                if rt[x, r, c] == pd[i]:
                    rt[x, r, c] = -1
    # each side closed up: its members first, then its holes, each in their order (a
    # stable sort on "is a hole"), the clocks moved along
    w = members.shape[1]
    hole_heard = np.empty(w, heard.dtype)
    for x in sorted_distinct(pl[:m].copy()):
        for lo, hi in ((0, half), (half, w)):
            o = lo
            h = 0
            for c in range(lo, hi):
                if members[x, c] >= 0:
                    members[x, o] = members[x, c]
                    heard[x, o] = heard[x, c]
                    o += 1
                else:
                    hole_heard[h] = heard[x, c]
                    h += 1
            for j in range(h):
                members[x, o + j] = -1
                heard[x, o + j] = hole_heard[j]
    zero_rows(out, 0, n_s)
    if n_s:
        requests, k, cursor = ask_rows(s_li[:n_s], s_row[:n_s], s_col[:n_s],
                                       np.zeros(n_s, np.int64), s_t[:n_s], rt, global_ids,
                                       req_type, out, pool, cursor, s_hr, s_rdist, s_lan)
        counts[N_ROW_REQUESTS] += requests
    else:
        k = np.int64(0)
    n_leaf = 0
    for i in range(m):
        if in_leaf[i]:
            n_leaf += 1
    lost = np.empty(n_leaf, np.int64)
    n_leaf = 0
    for i in range(m):
        if in_leaf[i]:
            lost[n_leaf] = pl[i]
            n_leaf += 1
    return sorted_distinct(lost), k, cursor


@numba.njit(cache=True)
def presume_silent_leaves(m, li, incarnation, timeout_us, rt, members, heard, failed,
                          failed_next, nbr, nbr_known, global_ids, half, slots_per_leaf,
                          req_type, counts, out, pool, cursor, s_hr, s_rdist, s_lan):
    """KA_TIMERs ``m`` at local nodes ``li`` (``LeafSetMaintenance.on_ka_timer``): the
    leaves silent longer than ``timeout_us`` at a timer of the node's current incarnation
    are presumed failed (:func:`presume_failed`, timer by timer, each one's leaf-set slots
    in order; counted in ``counts[N_PRESUMED_FAILED]``). Returns what
    :func:`presume_failed` does, which declines (nothing done) where more than
    ``slots_per_leaf`` table slots per silent leaf would ask. Room: ``slots_per_leaf`` rows
    per leaf-set slot of a timer. O(n * l + presume_failed)."""
    n = len(m)
    w = members.shape[1]
    pl = np.empty(n * w, np.int64)
    pd = np.empty(n * w, np.int64)
    pt = np.empty(n * w, np.int64)
    k = 0
    for i in range(n):
        x = li[i]
        if m[i][_KA_INCARNATION] != incarnation[x]:
            continue
        t = m[i]["time"]
        for c in range(w):
            if members[x, c] >= 0 and heard[x, c] < t - timeout_us:
                pl[k] = x
                pd[k] = members[x, c]
                pt[k] = t
                k += 1
    lost, asked, cursor = presume_failed(
        pl[:k], pd[:k], pt[:k], rt, members, heard, failed, failed_next, nbr, nbr_known,
        global_ids, half, k * slots_per_leaf, req_type, counts, out, pool, cursor, s_hr,
        s_rdist, s_lan)
    if asked >= 0:
        counts[N_PRESUMED_FAILED] += k
    return lost, asked, cursor


@numba.njit(cache=True)
def on_row_reply(m, li, rt, failed, global_ids, ids_hi, ids_lo, b, hr, rdist, lan,
                 req_type, counts, out, pool, cursor, s_hr, s_rdist, s_lan):
    """ROW_REPLY (``TableRepair.on_row_reply``): the helper is alive (:func:`senders_heard`);
    the entries it sent are offered to the slots asked for (``kernels.insert_table`` over
    all of them at once, probes counted: a slot may have been filled meanwhile, and an
    entry may fit another slot better), the slots so filled counted in
    ``counts[N_ROW_REPAIRS]`` (and ``counts[N_ROW_REPLY_RUNS]`` + 1 when an entry came);
    a slot still empty asks its next helper (:func:`ask_rows`, counted in
    ``counts[N_ROW_REQUESTS]``). Returns (probes, rows written, cursor). Room: 1 row per
    message. O(n * (memory + rows * 2^b) + insert_table)."""
    n = len(m)
    lil, _ = senders_heard(m, li, failed)
    row = np.empty(n, np.int64)
    col = np.empty(n, np.int64)
    attempt = np.empty(n, np.int64)
    t = np.empty(n, np.int64)
    n_got = 0
    for i in range(n):
        row[i] = m[i][_SLOT_ROW]
        col[i] = m[i][_SLOT_COLUMN]
        attempt[i] = m[i]["hops"] + 1
        t[i] = m[i]["time"]
        n_got += m[i][_SLOT_ENTRY] >= 0
    probes = 0
    if n_got:
        got = np.empty(n_got, np.int64)
        cand = np.empty((n_got, 1), np.int64)
        before = np.empty(n_got, np.int64)
        j = 0
        for i in range(n):
            if m[i][_SLOT_ENTRY] >= 0:
                got[j] = i
                cand[j, 0] = m[i][_SLOT_ENTRY]
                before[j] = rt[lil[i], row[i], col[i]]
                j += 1
        gli = lil[got]
        probes = insert_table(rt, gli, global_ids, cand, ids_hi, ids_lo, b, hr, rdist, lan,
                              failed)
        repairs = 0
        for j in range(n_got):
            i = got[j]
            repairs += before[j] < 0 and rt[lil[i], row[i], col[i]] >= 0
        counts[N_ROW_REPAIRS] += repairs
        counts[N_ROW_REPLY_RUNS] += 1
    requests, k, cursor = ask_rows(lil, row, col, attempt, t, rt, global_ids, req_type, out,
                                   pool, cursor, s_hr, s_rdist, s_lan)
    counts[N_ROW_REQUESTS] += requests
    return probes, k, cursor


@numba.njit(cache=True)
def on_hop_ack(m, li, failed, pending, deadline, identity, count):
    """HOP_ACK (``HopAcks.on_ack``): the senders are alive (out of the receivers' failed
    memory), and the pending hops the acknowledgements clear (:func:`.kernels.acked_pending`:
    k acks of one identity clear its k earliest pending copies) leave the first
    ``count[0]`` rows of ``pending``, ``deadline`` and ``identity``; the others keep their
    order, and ``count[0]`` becomes their number. Sends nothing. O(n * (memory +
    pending))."""
    n = len(m)
    lil, senders = senders_heard(m, li, failed)
    p = count[0]
    if p == 0:
        return
    acks = np.empty(n, np.uint64)
    for i in range(n):
        r = m[i]
        # the hop as its sender saw it: from the acknowledger's dst to its src
        acks[i] = hop_key(np.int64(r["dst"]), np.int64(r["src"]), np.int64(r["origin"]),
                          np.int64(r[_ACKED_TYPE]), np.int64(r[_ACKED_HOPS]),
                          np.int64(r["key_hi"]), np.int64(r["key_lo"]))
    keep = acked_pending(identity[:p], acks)
    j = 0
    for i in range(p):
        if keep[i]:
            if j < i:
                pending[j] = pending[i]
                deadline[j] = deadline[i]
                identity[j] = identity[i]
            j += 1
    count[0] = j


@numba.njit(cache=True)
def acknowledge_hops(m, li, joined, out, pool, cursor, s_hr, s_rdist, s_lan):
    """Routed messages ``m`` at their ``dst`` (local ``li``), with hop acknowledgements
    (``Router.receive``): a node still (re)joining has no tables to route with, so it
    stays silent -- its messages are dropped unanswered and their senders presume it
    failed and route around it --, except its own (src == dst); every kept message that
    came over a hop is acknowledged, a HOP_ACK back to its sender carrying the hop's
    identity (origin, key, type, hops), in row order. Returns (the rows kept, in order;
    rows written, cursor). O(n)."""
    n = len(m)
    keep = np.empty(n, np.int64)
    nk = 0
    w = 0
    for i in range(n):
        r = m[i]
        if not (joined[li[i]] or r["src"] == r["dst"]):
            continue
        keep[nk] = i
        nk += 1
        if r["src"] != r["dst"]:
            put_send(out, w, r["dst"], r["src"], HOP_ACK, r["time"], s_hr, s_rdist, s_lan)
            out[w]["origin"] = r["origin"]
            out[w]["key_hi"] = r["key_hi"]
            out[w]["key_lo"] = r["key_lo"]
            out[w][_ACKED_TYPE] = r["type"]
            out[w][_ACKED_HOPS] = r["hops"]
            w += 1
    return keep[:nk], w, cursor


@numba.njit(cache=True)
def expect_hops(hops, slack_us, pending, deadline, identity, count):
    """Routed hops just sent (records as sent: src = this node, dst = the next hop) wait
    for their acknowledgements: each is appended to the pending hops as its sender holds
    it (time = its sending time), with deadline = sent + 2 * latency + ``slack_us`` and
    identity :func:`.kernels.hop_key`. The room (``len(pending) - count[0]`` rows) is the
    caller's to ensure. O(hops)."""
    n = count[0]
    for i in range(len(hops)):
        h = hops[i]
        pending[n] = h
        pending[n]["time"] = h["sent"]
        deadline[n] = h["sent"] + 2 * (h["time"] - h["sent"]) + slack_us
        identity[n] = hop_key(np.int64(h["src"]), np.int64(h["dst"]), np.int64(h["origin"]),
                              np.int64(h["type"]), np.int64(h["hops"]), np.int64(h["key_hi"]),
                              np.int64(h["key_lo"]))
        n += 1
    count[0] = n


@numba.njit(cache=True)
def _expect_run_hops(out, k0, k1, slack_us, pending, deadline, identity, count):
    """After a run's sends ``out[k0:k1]``, with hop acknowledgements: its routed hops (mode
    1; one block, as ``Router._send_hop`` sends a step's hops) wait for their
    acknowledgements (:func:`expect_hops`) and their ACK_TIMERs follow the block, as
    ``HopAcks.expect`` sets them right after the hops (the sends after the block move
    on). Room: one row more per hop after ``k1``, and a pending row per hop (the
    caller's). Returns the run's rows. O(rows)."""
    a = k0
    while a < k1 and out[a]["mode"] != 1:
        a += 1
    b = a
    while b < k1 and out[b]["mode"] == 1:
        b += 1
    h = b - a
    if h == 0:
        return k1 - k0
    for i in range(b, k1):
        if out[i]["mode"] == 1:
            raise ValueError("a run sent its routed hops in more than one block")
    first = count[0]
    expect_hops(out[a:b], slack_us, pending, deadline, identity, count)
    for i in range(k1 - 1, b - 1, -1):
        out[i + h] = out[i]
    zero_rows(out, b, b + h)
    for j in range(h):
        _timer(out, b + j, out[a + j]["src"], deadline[first + j], ACK_TIMER)
    return k1 - k0 + h


@numba.njit(cache=True)
def _received(m, li, joined, out, pool, s_hr, s_rdist, s_lan):
    """A routed run's messages kept and acknowledged (:func:`acknowledge_hops`, HOP_ACKs
    from ``out[0]`` on): (the run itself when every one is kept, else the kept rows and
    their local indices copied -- slices of the same types --, acknowledgements
    written)."""
    keep, na, _ = acknowledge_hops(m, li, joined, out, pool, np.int64(0), s_hr, s_rdist,
                                   s_lan)
    if len(keep) == len(m):
        return m, li, na
    kept = np.empty(len(m), m.dtype)
    kept_li = np.empty(len(m), li.dtype)
    for j in range(len(keep)):
        kept[j] = m[keep[j]]
        kept_li[j] = li[keep[j]]
    return kept[0:len(keep)], kept_li[0:len(keep)], na


@numba.njit(cache=True)
def route_app_run(m, li, acks_off, learn, joined, acks, out, pool, s_hr, s_rdist, s_lan):
    """A run of the application's routed messages at their nodes ``li``, up to its upcalls
    (``Router.receive``, then ``Router.step``'s routing): with hop acknowledgements the
    messages are kept and acknowledged first (:func:`acknowledge_hops`, HOP_ACKs from
    ``out[0]`` on); then each one's next hop and kind (:func:`.kernels.route_step`) and the
    route log rows of those delivered here. Changes no state. Returns (ok, the records
    kept, their local indices, acknowledgements written, next hops, kinds, route log
    rows); ok False, nothing written, where a row is not routed or not this shard's, or
    (with acknowledgements) the pending hops lack room for a hop per message (the
    router's path grows them). ``learn``: ``PastryNodes.learn_inputs``, ``joined``: each
    node's joined flag, ``acks``: ``HopAcks.loop_inputs``. O(n routing steps)."""
    rt, members, heard, failed, nbr, nbr_keys, nbr_known, global_ids, ids_hi, ids_lo, b, \
        half, hr, rdist, lan = learn
    pending, pending_deadline, pending_identity, pending_count, slack_us = acks
    n = len(m)
    no_log = np.empty(0, ROUTE_LOG_DTYPE)
    no_next = np.empty(0, np.int64)
    no_kind = np.empty(0, np.int8)
    if not _routed_here(m, li):
        return False, m, li, np.int64(0), no_next, no_kind, no_log
    na = np.int64(0)
    if not acks_off:
        if pending_count[0] + n > len(pending) or n > len(out):
            return False, m, li, np.int64(0), no_next, no_kind, no_log
        m, li, na = _received(m, li, joined, out, pool, s_hr, s_rdist, s_lan)
    nxt, kind, counts = route_step(m, li, rt, members, nbr, ids_hi, ids_lo, b,
                                   LEAF_LOOKUP_64, FIRST_OWN_64, LAST_OWN_64)
    log = np.empty(counts[HERE_OWN] + counts[HERE_APP], ROUTE_LOG_DTYPE)
    route_log(m, kind, log)
    return True, m, li, na, nxt, kind, log


@numba.njit(cache=True)
def send_app_hops(m, nxt, kind, acks_off, acks, out, k, s_hr, s_rdist, s_lan):
    """The application's routed messages of :func:`route_app_run` that pass their node
    (after the forward upcall, which left their next hops as they were) one hop on, from
    send ``k`` of ``out`` (``Router._send_hop``), and with hop acknowledgements their
    pending rows and ACK_TIMERs (:func:`_expect_run_hops`). Room: two rows a message.
    Returns the rows written. O(n)."""
    pending, pending_deadline, pending_identity, pending_count, slack_us = acks
    k0 = k
    for i in range(len(m)):
        if kind[i] > HERE_APP and nxt[i] >= 0:
            _hop_on(out, k, m[i], nxt[i], s_hr, s_rdist, s_lan)
            k += 1
    if acks_off:
        return k - k0
    return _expect_run_hops(out, k0, k, slack_us, pending, pending_deadline, pending_identity,
                            pending_count)


@numba.njit(cache=True)
def ack_timers_idle(m, pending, deadline, count):
    """Whether ACK_TIMERs ``m`` find none of the first ``count[0]`` pending hops due
    (:func:`.kernels.hops_due`): ``HopAcks.on_timer`` then does nothing, which is the
    common case (the acknowledgement came in time). O(pending * n)."""
    p = count[0]
    if p == 0:
        return True
    _, k = hops_due(pending[:p], deadline[:p], m)
    return k == 0


# ---- the runs of a cell pass in one call ------------------------------------------------
# The codes on_runs hands its kernels, as int64 scalars: numba types a module's int as a
# literal, and each literal argument is a further compile of the kernel (and of those it
# calls) beside the one the handlers' Python path makes.
(JOIN_REQ_64, JOIN_64, JOIN_ROWS_64, JOIN_LEAFS_64, JOIN_NBRS_64, ANNOUNCE_64, KEEPALIVE_64,
 KA_TIMER_64, LEAF_REQ_64, LEAF_REPLY_64, LEAF_REFRESH_64, LEAF_LOOKUP_64, ROWS_REQ_64,
 ROWS_REPLY_64, FIRST_OWN_64, LAST_OWN_64, ROW_REPLY_64, ROW_REQ_64) = (
    np.int64(c) for c in (JOIN_REQ, JOIN, JOIN_ROWS, JOIN_LEAFS, JOIN_NBRS, ANNOUNCE, KEEPALIVE,
                          KA_TIMER, LEAF_REQ, LEAF_REPLY, LEAF_REFRESH, LEAF_LOOKUP, ROWS_REQ,
                          ROWS_REPLY, FIRST_OWN, LAST_OWN, ROW_REPLY, ROW_REQ))


def joined_room(l: int, rows: int, width: int, nbrs: int, exchange_rows: int) -> int:
    """Send rows :func:`joined` may write per node that just joined."""
    return l + rows * width + nbrs + 3 + min(exchange_rows, rows) * width


@numba.njit(cache=True)
def on_runs(m, payload, local, bounds, first, last, acks_off, learn, joins, acks, seed,
            draws, run_rows, joined_rows, counts, out, pool, cursor, s_hr, s_rdist, s_lan):
    """Runs ``first..last-1`` of a cell pass (``m`` the pass's records in dispatch order,
    run r = rows ``bounds[r]:bounds[r + 1]``, one message type each, every type one that
    ``handlers.tables`` gives as compiled), each handled by the kernels its handler calls
    (:func:`on_join_start`, :func:`on_join_req`, :func:`on_join`, :func:`on_join_piece`
    then :func:`joined` for the nodes it completes, :func:`on_announce`, :func:`on_leaf_req`,
    :func:`on_leaf_reply`, :func:`on_ka_timer` (after :func:`presume_silent_leaves` where
    a leaf went silent), :func:`on_leaf_refresh`,
    :func:`on_leaf_lookup`, :func:`on_rows_req`, :func:`on_rows_reply`,
    :func:`on_row_req`, :func:`on_row_reply`, :func:`on_hop_ack`,
    :func:`ack_timers_idle`), in run order,
    their sends one after the other: the same rows, state changes and sends as one call
    per run, without a Python handler, a kernel dispatch and a boxed result per run (a
    cell of the faithful bootstrap holds ~25 messages in ~5 runs, and that glue cost as
    much as the work). With hop acknowledgements (``acks_off`` false) the routed runs
    keep and acknowledge their messages first (:func:`acknowledge_hops`) and the hops a
    run sends wait for theirs (:func:`_expect_run_hops`), as ``Router.receive`` and
    ``Router._send_hop`` do.

    Stops before a run it declines, which the caller then hands to the type's handler:
    a run of a type that sends hops (``handlers.Handler.hop``) with more messages than
    the pending hops have room for (the handler's path grows them), a LEAF_REFRESH run that holds a
    table-maintenance tick, an ACK_TIMER run that finds a hop lost, and runs
    :func:`on_join_start`, :func:`on_join`, :func:`on_leaf_refresh`,
    :func:`on_leaf_lookup` or :func:`presume_silent_leaves` do not take (nothing done).
    Returns (the first run not handled,
    probes, the nodes whose leaf set changed in the handled runs -- distinct, sorted --,
    the route log rows of the handled runs in their order, how many nodes joined, rows
    written, cursor). Room: the sum of ``handlers.tables``' room over the runs' messages
    (``run_rows[type]`` its rows per message, ``joined_rows`` :func:`joined_room`), not
    zeroed: each run zeroes the rows it may write before its kernel, and a join piece's
    run only those of the nodes it completes (its bound, a whole join's sends per piece,
    is ~7 times what the pieces write). ``learn``: ``PastryNodes.learn_inputs``, ``joins``:
    ``JoinProtocol.run_inputs``, ``acks``: ``HopAcks.loop_inputs`` (tuples, taken apart
    here: a tuple spread into a call is copied first, a reference count more for each of
    its arrays). ``counts``: the counters the runs add to (``N_ROW_REQUESTS``, ...). O(sum
    of the kernels' costs)."""
    rt, members, heard, failed, nbr, nbr_keys, nbr_known, global_ids, ids_hi, ids_lo, b, \
        half, hr, rdist, lan = learn
    joined_flags, nbrs_got, rows_expected, rows_got, incarnation, keepalive_us, timeout_us, \
        refresh_us, refresh_until, refresh_rounds, table_us, exchange_rows, req_max_retries, \
        req_retry_us, failed_next = joins
    pending, pending_deadline, pending_identity, pending_count, slack_us = acks
    changed_nodes = np.empty(len(m), np.int64)
    n_changed = 0
    probes = 0
    n_joined = 0
    log = np.empty(0, ROUTE_LOG_DTYPE)
    # what a run that learns nothing reports (made once: each array is an allocation)
    no_uli = changed_nodes[:0]
    no_changed = np.empty(0, np.bool_)
    k = np.int64(0)     # (not a literal 0: a further compile of each callee)
    pos = cursor
    r = first
    while r < last:
        s = bounds[r]
        e = bounds[r + 1]
        mm = m[s:e]
        li = local[s:e]
        n = e - s
        ty = mm[0]["type"]
        p = 0
        uli = no_uli
        changed = no_changed
        if ty != JOIN_ROWS and ty != JOIN_LEAFS and ty != JOIN_NBRS and ty != LEAF_REFRESH:
            zero_rows(out, k, k + n * run_rows[ty])
        if ty == JOIN_START:
            contact = np.empty(n, np.int64)
            attempt = np.empty(n, np.int64)
            for i in range(n):
                contact[i] = mm[i][_CONTACT]
                attempt[i] = mm[i][_ATTEMPT]
            ok, kk, pos = on_join_start(mm, contact, attempt, JOIN_REQ_64, out[k:], pool, pos,
                                        s_hr, s_rdist, s_lan)
            if not ok:
                break
        elif ty == JOIN_REQ:
            if not acks_off and pending_count[0] + n > len(pending):
                break   # (the handler's path makes the pending hops room)
            joiner = np.empty(n, np.int64)
            retries = np.empty(n, np.int64)
            for i in range(n):
                joiner[i] = mm[i][_REQ_JOINER]
                retries[i] = mm[i][_RETRIES]
            rows, kk, pos = on_join_req(
                mm, li, joined_flags, joiner, retries, req_max_retries, req_retry_us, rt,
                members, nbr, ids_hi, ids_lo, b, LEAF_LOOKUP_64, FIRST_OWN_64, LAST_OWN_64,
                JOIN_REQ_64, JOIN_NBRS_64, JOIN_64, JOIN_ROWS_64, JOIN_LEAFS_64, acks_off,
                pending, pending_deadline, pending_identity, pending_count, slack_us, out[k:],
                pool, pos, s_hr, s_rdist, s_lan)
            log = concat_rows(log, rows)
        elif ty == JOIN:
            na = np.int64(0)
            if not acks_off:
                if pending_count[0] + n > len(pending):
                    break   # (the handler's path makes the pending hops room)
                mm, li, na = _received(mm, li, joined_flags, out[k:], pool, s_hr, s_rdist,
                                       s_lan)
                n = len(mm)
            joiner = np.empty(n, np.int64)
            for i in range(n):
                joiner[i] = mm[i][_JOINER]
            ok, rows, kk, pos2 = on_join(
                mm, li, joiner, rt, members, nbr, ids_hi, ids_lo, b, LEAF_LOOKUP_64, FIRST_OWN_64,
                LAST_OWN_64, JOIN_ROWS_64, JOIN_LEAFS_64, out[k + na:], pool, pos, s_hr, s_rdist,
                s_lan)
            if not ok:
                break
            pos = pos2
            log = concat_rows(log, rows)
            if not acks_off:
                kk = na + _expect_run_hops(out, k + na, k + na + kk, slack_us, pending,
                                           pending_deadline, pending_identity, pending_count)
        elif ty == JOIN_ROWS or ty == JOIN_LEAFS or ty == JOIN_NBRS:
            piece = PIECE_ROWS if ty == JOIN_ROWS else \
                PIECE_LEAFS if ty == JOIN_LEAFS else PIECE_NBRS
            route_nodes = np.empty(n, np.int64)
            for i in range(n):
                route_nodes[i] = mm[i][_ROUTE_NODES]
            p, uli, changed, jli, jt, kk, pos = on_join_piece(
                mm, payload, li, piece, route_nodes, rt, members, heard, failed, nbr,
                nbr_keys, nbr_known, global_ids, ids_hi, ids_lo, b, half, hr, rdist, lan,
                joined_flags, nbrs_got, rows_expected, rows_got, out[k:], pool, pos, s_hr,
                s_rdist, s_lan)
            if len(jli):   # JoinProtocol._joined
                n_joined += len(jli)
                zero_rows(out, k + kk, k + kk + len(jli) * joined_rows)
                kj, pos = joined(jli, jt, members, rt, nbr, heard, global_ids, incarnation,
                                 ANNOUNCE_64, keepalive_us, KA_TIMER_64, refresh_us, refresh_until,
                                 refresh_rounds, LEAF_REFRESH_64, table_us, exchange_rows,
                                 ROWS_REQ_64, out[k + kk:], pool, pos, s_hr, s_rdist, s_lan)
                kk += kj
        elif ty == ANNOUNCE:
            in_leaf_set = np.empty(n, np.int64)
            for i in range(n):
                in_leaf_set[i] = mm[i][_IN_LEAF_SET]
            p, uli, changed, kk, pos = on_announce(
                mm, li, in_leaf_set, rt, members, heard, failed, nbr, nbr_keys, nbr_known,
                global_ids, ids_hi, ids_lo, b, half, hr, rdist, lan, LEAF_REQ_64, LEAF_REPLY_64,
                out[k:], pool, pos, s_hr, s_rdist, s_lan)
        elif ty == KEEPALIVE:
            p, uli, changed, kk, pos = on_keepalive(
                mm, li, rt, members, heard, failed, nbr, nbr_keys, nbr_known, global_ids,
                ids_hi, ids_lo, b, half, hr, rdist, lan, KEEPALIVE_64, out[k:], pool, pos,
                s_hr, s_rdist, s_lan)
        elif ty == KA_TIMER:   # (LeafSetMaintenance.on_ka_timer)
            ok, kk, pos = on_ka_timer(
                mm, li, incarnation, members, heard, joined_flags, global_ids, half, timeout_us,
                np.bool_(True), keepalive_us, LEAF_REQ_64, KEEPALIVE_64, KA_TIMER_64, out[k:],
                pool, pos, s_hr, s_rdist, s_lan)
            if not ok:   # a leaf went silent: presume the silent ones failed, then the round
                # (a routing table holds an id in one slot, its prefix's: one request per
                # leaf, the room handlers.tables gives; more and the handler takes the run)
                uli, asked, pos = presume_silent_leaves(
                    mm, li, incarnation, timeout_us, rt, members, heard, failed, failed_next,
                    nbr, nbr_known, global_ids, half, np.int64(1), ROW_REQ_64, counts,
                    out[k:], pool, pos, s_hr, s_rdist, s_lan)
                if asked < 0:
                    break
                changed = np.ones(len(uli), np.bool_)
                ok, kk, pos = on_ka_timer(
                    mm, li, incarnation, members, heard, joined_flags, global_ids, half,
                    timeout_us, np.bool_(False), keepalive_us, LEAF_REQ_64, KEEPALIVE_64,
                    KA_TIMER_64, out[k + asked:], pool, pos, s_hr, s_rdist, s_lan)
                kk += asked
        elif ty == ROW_REQ:
            kk, pos = on_row_req(mm, li, failed, rt, ROW_REPLY_64, out[k:], pool, pos, s_hr,
                                 s_rdist, s_lan)
        elif ty == ROW_REPLY:
            p, kk, pos = on_row_reply(mm, li, rt, failed, global_ids, ids_hi, ids_lo, b, hr,
                                      rdist, lan, ROW_REQ_64, counts, out[k:], pool, pos, s_hr,
                                      s_rdist, s_lan)
        elif ty == HOP_ACK:
            on_hop_ack(mm, li, failed, pending, pending_deadline, pending_identity,
                       pending_count)
            kk = np.int64(0)
        elif ty == ACK_TIMER:   # (HopAcks.on_timer's common case: nothing lost)
            if not ack_timers_idle(mm, pending, pending_deadline, pending_count):
                break
            kk = np.int64(0)
        elif ty == LEAF_REQ:
            kk, pos = on_leaf_req(mm, li, members, failed, LEAF_REPLY_64, out[k:], pool, pos,
                                  s_hr, s_rdist, s_lan)
        elif ty == LEAF_REPLY:
            p, uli, changed, kk, pos = on_leaf_reply(
                mm, payload, li, rt, members, heard, failed, nbr, nbr_keys, nbr_known,
                global_ids, ids_hi, ids_lo, b, half, hr, rdist, lan, ANNOUNCE_64,
                out[k:], pool, pos, s_hr, s_rdist, s_lan)
        elif ty == LEAF_REFRESH:   # (LeafSetMaintenance.on_leaf_refresh)
            if not acks_off and pending_count[0] + n > len(pending):
                break   # (the handler's path makes the pending hops room)
            # the table-maintenance ticks first, then the own-id lookups of the others
            tick = np.zeros(n, np.bool_)
            n_tick = 0
            n_asked = 0
            for i in range(n):
                if mm[i][_TABLE_TICK] == 1 and mm[i][_INCARNATION] == incarnation[li[i]]:
                    tick[i] = True
                    n_tick += 1
                    n_asked += _rows_known(rt, li[i])
            look = np.flatnonzero(~tick)
            lm = mm[look] if n_tick else mm
            lli = li[look] if n_tick else li
            if not _all_know_someone(lm, lli, incarnation, members, rt):
                break   # (nothing done: the router's general path draws for them)
            zero_rows(out, k, k + n_asked + n_tick + 2 * len(lm))
            kt = k
            if n_tick:
                kt = table_ticks(mm, li, tick, rt, seed, draws, global_ids, incarnation,
                                 ROWS_REQ_64, LEAF_REFRESH_64, table_us, refresh_until, out, k,
                                 s_hr, s_rdist, s_lan)
            inc_col = np.empty(len(lm), np.int64)
            done_col = np.empty(len(lm), np.int64)
            for i in range(len(lm)):
                inc_col[i] = lm[i][_INCARNATION]
                done_col[i] = lm[i][_LOOKUPS_DONE]
            _, kk, pos = on_leaf_refresh(
                lm, lli, incarnation, inc_col, done_col, ids_hi, ids_lo, members, rt, seed,
                draws, global_ids, LEAF_LOOKUP_64, LEAF_REFRESH_64, refresh_us, refresh_until,
                refresh_rounds, out[kt:], pool, pos, s_hr, s_rdist, s_lan)
            kk += kt - k
            if not acks_off:
                kk = _expect_run_hops(out, k, k + kk, slack_us, pending, pending_deadline,
                                      pending_identity, pending_count)
        elif ty == LEAF_LOOKUP:
            na = np.int64(0)
            if not acks_off:
                if pending_count[0] + n > len(pending):
                    break   # (the handler's path makes the pending hops room)
                mm, li, na = _received(mm, li, joined_flags, out[k:], pool, s_hr, s_rdist,
                                       s_lan)
                n = len(mm)
            ok, rows, p, uli, changed, kk, pos2 = on_leaf_lookup(
                mm, li, rt, members, nbr, ids_hi, ids_lo, b, LEAF_LOOKUP_64, FIRST_OWN_64,
                LAST_OWN_64, heard, failed, nbr_keys, nbr_known, global_ids, half, hr, rdist,
                lan, LEAF_REPLY_64, out[k + na:], pool, pos, s_hr, s_rdist, s_lan)
            if not ok:
                break
            pos = pos2
            log = concat_rows(log, rows)
            if not acks_off:
                kk = na + _expect_run_hops(out, k + na, k + na + kk, slack_us, pending,
                                           pending_deadline, pending_identity, pending_count)
        elif ty == ROWS_REQ:
            asked = np.empty(n, np.int64)
            for i in range(n):
                asked[i] = mm[i][_ROW_ASKED]
            kk, pos = on_rows_req(mm, li, asked, rt, ROWS_REPLY_64, out[k:], pool, pos, s_hr,
                                  s_rdist, s_lan)
        elif ty == ROWS_REPLY:
            p, kk, pos = on_rows_reply(mm, payload, li, rt, failed, global_ids, ids_hi,
                                       ids_lo, b, hr, rdist, lan, out[k:], pool, pos, s_hr,
                                       s_rdist, s_lan)
        else:
            break
        k += kk
        probes += p
        for q in range(len(uli)):
            if changed[q]:
                changed_nodes[n_changed] = uli[q]
                n_changed += 1
        r += 1
    return r, probes, sorted_distinct(changed_nodes[:n_changed]), log, n_joined, k, pos

