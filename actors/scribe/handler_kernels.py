"""Scribe's tree-maintenance and dissemination handlers as whole compiled passes: a
handler's look-ups, its state changes and its sends in one numba call.

Under churn every node ticks and heartbeats each period, so a 2 ms cell hands TICK,
HEARTBEAT, REFRESH and DATA a few messages each, and a handler's glue (dispatch, record
arrays, the sends' copies and arrival times, the next timers) would cost far more than its
work. Each kernel here is the common case of one handler (``repair.TreeRepair``,
``multicast.Dissemination``, ``membership.TreeJoins`` for JOIN_ACK): the same state
changes, the same records in the same order (``emulator.kernels.put_send`` sets their
arrival times as the engine would), the same counters and log rows.
``tests/test_scribe_repair.py`` compares them with the general path record by record.

Every kernel zeroes the rows it writes (the rows lent to ``on_runs`` are not zeroed).
Every kernel first checks, writing nothing, that its case holds (every row a direct
message of its type for a node of this shard, and the handler's own conditions); if not it
returns status 0 and the handler's general path takes the batch untouched. Status 2 means
the rows lent were too few: ``need`` is the exact count, nothing was written, and the
caller asks again. Each ends with the arguments ``ShardContext.send_compiled`` appends
(out, pool, cursor, host_router, router_dist, lan_us) and returns (status, need, ...,
rows written, cursor).
"""

from __future__ import annotations

import numba
import numpy as np

from emulator.kernels import concat_rows, put_send, unique_first, zero_rows

from .collapse_kernels import on_adopt, on_collapse_wave
from .kernel_rows import DECLINED, DONE, MORE_ROOM, direct_rows, put_group, start_route
from .kernels import (
    active_slot,
    heard_parent,
    mark_sent,
    start_clocks,
    tick_is_common,
    tick_quiet,
    tick_slots,
    write_child,
)
from .keyindex import any_within, has_room, insert_key, key_value, ranges_where
from .rendezvous_kernels import create_routes, on_create, on_replica, slot_room, slots_of
from .types import Data, Join, JoinAck, JoinReq, Mcast, Refresh, RpAddr

# type-specific columns (compile-time constants inside the kernels)
_PUBLISH = Data.publish_time
_SEQNO = Data.seqno
_HOPS = Data.total_hops
_CREDENTIAL = Refresh.credential
_ACL = JoinAck.acl
_PARENT_SEQ = JoinAck.parent_seq
_JOIN_CREDENTIAL = Join.credential
_JOIN_LAST_SEQ = Join.last_seq
_REQ_CREDENTIAL = JoinReq.credential
_MCAST_CREDENTIAL = Mcast.credential
_MCAST_SEQNO = Mcast.seqno
_MCAST_PUBLISH = Mcast.publish_time
_RP = RpAddr.rp


@numba.njit(cache=True)
def _one_send_per_row(m, li, type_, out):
    """How a kernel that sends at most one message per row starts: DECLINED unless every
    row is a direct ``type_`` message for a node of this shard, MORE_ROOM if fewer rows
    were lent than there are messages, else DONE with those rows zeroed."""
    if not direct_rows(m, li, type_):
        return DECLINED
    if len(m) > len(out):
        return MORE_ROOM
    zero_rows(out, np.int64(0), len(m))
    return DONE


@numba.njit(cache=True)
def _put_leave(out, w, r, leave_type, key_hi, key_lo, s_hr, s_rdist, s_lan):
    """Row w of out: a LEAVE from r's receiver back to its sender, for r's group."""
    put_send(out, w, r["dst"], r["src"], leave_type, r["time"], s_hr, s_rdist, s_lan)
    put_group(out, w, r["group"], key_hi, key_lo)


@numba.njit(cache=True)
def on_tick(m, li, node_ids, six, eix, n_groups, active, root, parent, last_heard, last_sent,
            valid, refresh, group, join_cred, child, key_hi, key_lo, stale, ticking, period,
            silent_after, stale_after, tick_type, refresh_type, heartbeat_type,
            out, pool, cursor, s_hr, s_rdist, s_lan):
    """A TICK cell in the common case (``TreeRepair.on_tick`` with ``TreeState.tick_plan``
    and ``_after_tick``; no reliable layer, no root paths; ``kernels.tick_is_common``): no parent
    silent longer than ``silent_after``, no child entry older than ``stale_after``, no RP
    whose replicas are stale, no child id -1. Each ticking node's active slots (in group
    order) whose parent is set refresh their entry there (REFRESH with the slot's JOIN
    credential), every child not sent data within ``period`` gets a HEARTBEAT, and every
    node that still holds tree state its next TICK; a node without any stops ticking.
    A slot's unset ``last_heard`` becomes its tick time, ``last_sent`` the tick time of a
    slot that sends heartbeats; the nodes' replica marks are cleared. Rows: refreshes +
    heartbeats + timers. O(q log q + slots + children)."""
    n = len(m)
    if not direct_rows(m, li, tick_type):
        return DECLINED, 0, 0, cursor
    times = np.empty(n, np.int64)
    for i in range(n):
        times[i] = m[i]["time"]
    nodes, now_n, qi, s, ci, e = tick_slots(six, eix, li, times, active, valid)
    k = len(nodes)
    if not tick_is_common(now_n, qi, s, ci, e, root, last_heard, refresh, silent_after,
                          stale_after):
        return DECLINED, 0, 0, cursor
    n_ref = 0
    for r in range(len(s)):
        v = s[r]
        if root[v] and stale[nodes[qi[r]]]:
            return DECLINED, 0, 0, cursor
        if not root[v] and parent[v] >= 0:
            n_ref += 1
    quiet = tick_quiet(now_n, qi, s, ci, e, last_sent, period)
    n_hb = 0
    for j in range(len(e)):
        if quiet[j]:
            if child[e[j]] < 0:
                return DECLINED, 0, 0, cursor
            n_hb += 1
    busy = np.zeros(k, np.bool_)
    for r in range(len(s)):
        busy[qi[r]] = True
    n_busy = 0
    for q in range(k):
        n_busy += busy[q]
    need = n_ref + n_hb + n_busy
    if need > len(out):
        return MORE_ROOM, need, 0, cursor
    # the case holds: write
    zero_rows(out, np.int64(0), need)
    start_clocks(now_n, qi, s, last_heard)
    w = np.int64(0)     # (not a literal 0: that would be a further compile of each callee)
    for r in range(len(s)):
        v = s[r]
        if not root[v] and parent[v] >= 0:
            put_send(out, w, node_ids[nodes[qi[r]]], parent[v], refresh_type, now_n[qi[r]],
                     s_hr, s_rdist, s_lan)
            put_group(out, w, group[v], key_hi, key_lo)
            out[w][_CREDENTIAL] = join_cred[v]
            w += 1
    for j in range(len(e)):
        if quiet[j]:
            r = ci[j]
            put_send(out, w, node_ids[nodes[qi[r]]], child[e[j]], heartbeat_type, now_n[qi[r]],
                     s_hr, s_rdist, s_lan)
            put_group(out, w, group[s[r]], key_hi, key_lo)
            w += 1
    mark_sent(now_n, qi, s, ci, quiet, last_sent)
    for q in range(k):
        stale[nodes[q]] = False
        if busy[q]:
            g = node_ids[nodes[q]]
            put_send(out, w, g, g, tick_type, now_n[q] + period, s_hr, s_rdist, s_lan)
            w += 1
        else:
            ticking[nodes[q]] = False
    return DONE, 0, w, cursor


@numba.njit(cache=True)
def on_data(m, li, six, eix, n_groups, max_hops, active, parent, member, last_heard, last_seq,
            last_sent, valid, child, key_hi, key_lo, data_type,
            out, pool, cursor, s_hr, s_rdist, s_lan):
    """A DATA cell without the reliable layer (``Dissemination._data_plain``: ``TreeState.
    data_plan``, ``delivery_columns``, ``data_copies``): each row's active slot (rows
    without one counted), ``last_heard`` set where the sender is the slot's parent (row
    order), copies past ``max_hops`` counted and dropped; for the rest ``last_seq`` raised
    to the seqno (from the values before the cell, the last row of a slot written last),
    the member rows returned (each is a delivery: the log's columns are fields of the
    row, ``multicast.DELIVERY_FROM_DATA``), and one copy per child, one tree hop further
    (``last_sent`` set to the row's time). Declines where a child id is -1.
    Returns (status, need, no-state count, hop-limit count, the member rows of m in row
    order, rows, cursor). O(q + children)."""
    n = len(m)
    s = np.empty(n, np.int64)
    hit = np.empty(n, np.int64)
    none = np.empty(0, np.int64)
    if not direct_rows(m, li, data_type):
        return DECLINED, 0, 0, 0, none, 0, cursor
    no_state = 0
    looping = 0
    nh = 0
    for i in range(n):
        v = key_value(six, np.int64(li[i]) * n_groups + np.int64(m[i]["group"]))
        if v >= 0 and not active[v]:
            v = -1
        s[i] = v
        if v < 0:
            no_state += 1
        elif m[i][_HOPS] > max_hops:
            looping += 1
        else:
            hit[nh] = i
            nh += 1
    hit = hit[:nh]
    hs = np.empty(nh, np.int64)
    for j in range(nh):
        hs[j] = s[hit[j]]
    qi, e = ranges_where(eix, hs, valid)
    for j in range(len(e)):
        if child[e[j]] < 0:
            return DECLINED, 0, 0, 0, none, 0, cursor
    if len(e) > len(out):
        return MORE_ROOM, len(e), 0, 0, none, 0, cursor
    # the case holds: write
    zero_rows(out, np.int64(0), len(e))
    for i in range(n):
        heard_parent(s[i], m[i]["src"], m[i]["time"], active, parent, last_heard)
    nodes, group, origin, time, publish, seqno, hops = _data_rows(m, hit)
    mem, w = disseminate_rows(hs, nodes, group, origin, time, publish, seqno, hops, qi, e,
                              np.bool_(True), last_seq, last_sent, member, child, key_hi,
                              key_lo, data_type, out, np.int64(0), s_hr, s_rdist, s_lan)
    return DONE, 0, no_state, looping, hit[mem], w, cursor


@numba.njit(cache=True)
def _data_rows(m, rows):
    """Rows ``rows`` of DATA records ``m`` as the columns :func:`disseminate_rows` takes
    (int64 each): node (dst), group, origin, time, publish time, seqno, tree hops. O(rows)."""
    n = len(rows)
    cols = np.empty((7, n), np.int64)
    for j in range(n):
        r = m[rows[j]]
        cols[0, j], cols[1, j], cols[2, j], cols[3, j] = r["dst"], r["group"], r["origin"], \
            r["time"]
        cols[4, j], cols[5, j], cols[6, j] = r[_PUBLISH], r[_SEQNO], r[_HOPS]
    return cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6]


@numba.njit(cache=True)
def disseminate_rows(slots, nodes, group, origin, time, publish, seqno, hops, qi, e, numbered,
                     last_seq, last_sent, member, child, key_hi, key_lo, data_type, out, w,
                     s_hr, s_rdist, s_lan):
    """Dissemination (``Dissemination.disseminate``) of one message per row at its tree
    slot ``slots[j]``: its node, group, origin, time here, publish time, seqno and tree
    hops so far. ``numbered`` (without the reliable layer, which numbers and releases
    itself): ``last_seq`` raised to the seqno (from the values before the call, the last
    row of a slot written last) and the rows whose slot is a member's returned (their
    deliveries). Then the forwarding step: one DATA copy per child entry ``e[j]`` of row
    ``qi[j]`` (``ranges_where`` / ``TreeState.children_of``: by row, then child), one tree
    hop further, from send ``w`` on, and ``last_sent`` set to the row's time (the copies
    are heartbeats). Returns (member rows, the send after the copies). O(rows +
    children)."""
    nh = len(slots)
    n_mem = 0
    if numbered:
        raised = np.empty(nh, np.int64)
        for j in range(nh):
            raised[j] = max(last_seq[slots[j]], seqno[j])
        for j in range(nh):
            last_seq[slots[j]] = raised[j]
            n_mem += member[slots[j]]
    mem = np.empty(n_mem, np.int64)
    k = 0
    for j in range(nh if numbered else 0):
        if member[slots[j]]:
            mem[k] = j
            k += 1
    for j in range(len(qi)):
        last_sent[slots[qi[j]]] = time[qi[j]]
    for j in range(len(qi)):
        i = qi[j]
        put_send(out, w, nodes[i], child[e[j]], data_type, time[i], s_hr, s_rdist, s_lan)
        put_group(out, w, group[i], key_hi, key_lo)
        out[w]["origin"] = origin[i]
        out[w][_PUBLISH] = publish[i]
        out[w][_SEQNO] = seqno[i]
        out[w][_HOPS] = hops[i] + 1
        w += 1
    return mem, w


@numba.njit(cache=True)
def disseminate_sends(slots, nodes, group, origin, time, publish, seqno, hops, qi, e, numbered,
                      last_seq, last_sent, member, child, key_hi, key_lo, data_type, out, pool,
                      cursor, s_hr, s_rdist, s_lan):
    """:func:`disseminate_rows` as a handler's pass (``ctx.send_compiled``: ``out`` lends
    one record per child entry, not zeroed). Returns (member rows, sends, cursor).
    O(rows + children)."""
    zero_rows(out, np.int64(0), len(e))
    mem, w = disseminate_rows(slots, nodes, group, origin, time, publish, seqno, hops, qi, e,
                              numbered, last_seq, last_sent, member, child, key_hi, key_lo,
                              data_type, out, np.int64(0), s_hr, s_rdist, s_lan)
    return mem, w, cursor


@numba.njit(cache=True)
def on_mcast(m, li, mode, six, eix, n_groups, active, root, acl, member, last_seq, last_sent,
             valid, child, key_hi, key_lo, mcast_type, data_type, rp_addr_type, out, pool,
             cursor, s_hr, s_rdist, s_lan):
    """MCASTs at their group's RP without the reliable layer (``Dissemination.
    _mcast_at_rp``): sent to it directly (``mode`` 0: the source held its address) or
    routed to it (``mode`` 1: the deliver upcall; the sources learn the RP's address, an
    RP_ADDR to each other origin, sent first). Then the dissemination: ``last_seq``
    raised to the seqno (from the values before the call, the last row of a slot written
    last), a delivery for each member (returned as the records a DATA copy of it would
    be: publish time, seqno and hops -- the MCAST's overlay hops -- in DATA's fields,
    ``multicast.DELIVERY_FROM_DATA``), one DATA copy per child, one hop further
    (``last_sent`` set to the row's time). Declines, writing nothing, where a row is not
    an MCAST of ``mode`` for a node of this shard, a node is not the RP (an active root
    slot: a stale cached address, which the handler routes on), a credential is not the
    group's ACL (refused) or a child id is -1. Returns (status, need, deliveries, rows,
    cursor). O(rows + children)."""
    n = len(m)
    s = np.empty(n, np.int64)
    none = np.empty(0, m.dtype)
    n_addr = 0
    for i in range(n):
        r = m[i]
        if li[i] < 0 or r["mode"] != mode or r["type"] != mcast_type:
            return DECLINED, 0, none, 0, cursor
        v = key_value(six, np.int64(li[i]) * n_groups + np.int64(r["group"]))
        if v < 0 or not (root[v] and active[v]) or r[_MCAST_CREDENTIAL] != acl[v]:
            return DECLINED, 0, none, 0, cursor
        s[i] = v
        if mode == 1 and r["origin"] != r["dst"]:
            n_addr += 1
    qi, e = ranges_where(eix, s, valid)
    for j in range(len(e)):
        if child[e[j]] < 0:
            return DECLINED, 0, none, 0, cursor
    if n_addr + len(e) > len(out):
        return MORE_ROOM, n_addr + len(e), none, 0, cursor
    # the case holds: write
    zero_rows(out, np.int64(0), n_addr + len(e))
    w = 0
    if n_addr:
        for i in range(n):
            r = m[i]
            if r["origin"] != r["dst"]:
                put_send(out, w, r["dst"], r["origin"], rp_addr_type, r["time"], s_hr,
                         s_rdist, s_lan)
                put_group(out, w, r["group"], key_hi, key_lo)
                out[w][_RP] = r["dst"]
                w += 1
    cols = np.empty((7, n), np.int64)
    for i in range(n):
        r = m[i]
        cols[0, i], cols[1, i], cols[2, i], cols[3, i] = r["dst"], r["group"], r["origin"], \
            r["time"]
        cols[4, i], cols[5, i], cols[6, i] = r[_MCAST_PUBLISH], r[_MCAST_SEQNO], r["hops"]
    publish, seqno, hops = cols[4], cols[5], cols[6]
    mem, w = disseminate_rows(s, cols[0], cols[1], cols[2], cols[3], publish, seqno, hops, qi,
                              e, np.bool_(True), last_seq, last_sent, member, child, key_hi,
                              key_lo, data_type, out, np.int64(w), s_hr, s_rdist, s_lan)
    deliveries = np.empty(len(mem), m.dtype)
    for k in range(len(mem)):   # as the DATA copy a member gets
        i = mem[k]
        deliveries[k] = m[i]
        deliveries[k][_PUBLISH] = publish[i]
        deliveries[k][_SEQNO] = seqno[i]
        deliveries[k][_HOPS] = hops[i]
    return DONE, 0, deliveries, w, cursor


@numba.njit(cache=True)
def on_mcast_routed(m, li, state, out, pool, cursor, s_hr, s_rdist, s_lan):
    """MCASTs routed to their RP (the deliver upcall, ``Scribe.deliver``): :func:`on_mcast`
    with mode 1, then with tree repair the first TICK timers of the nodes that now hold
    tree state (:func:`first_ticks`, ``TreeRepair.start_ticks`` after the handler).
    ``state``: ``Scribe.runs_state``. Returns as :func:`on_mcast`."""
    ticking, period = state[_S_TICKING], state[_S_PERIOD]
    for i in range(len(m)):
        if li[i] < 0:
            return DECLINED, 0, np.empty(0, m.dtype), 0, cursor
    n_new = _tick_room(li, ticking, period)
    if len(out) < n_new:
        return MORE_ROOM, n_new + len(m), np.empty(0, m.dtype), 0, cursor
    six, active = state[_S_SIX], state[_S_ACTIVE]
    st, need, got, k, cursor = on_mcast(
        m, li, np.int64(1), six, state[_S_EIX], state[_S_N_GROUPS], active, state[_S_ROOT],
        state[_S_ACL], state[_S_MEMBER], state[_S_LAST_SEQ], state[_S_LAST_SENT],
        state[_S_VALID], state[_S_CHILD], state[_S_KEY_HI], state[_S_KEY_LO], state[_S_MCAST],
        state[_S_DATA], state[_S_RP_ADDR], out[:len(out) - n_new], pool, cursor, s_hr,
        s_rdist, s_lan)
    if st != DONE:
        return st, need + n_new, got, k, cursor
    k = first_ticks_all(m, li, six, active, ticking, state[_S_NODE_IDS], period,
                        state[_S_TICK], out, k, s_hr, s_rdist, s_lan)
    return DONE, 0, got, k, cursor


@numba.njit(cache=True)
def on_routed_run(m, li, here, next_hop, replicas, state, tree_sizes, out, pool, cursor, s_hr,
                  s_rdist, s_lan):
    """A routing step's deliver and forward upcalls for a run of one of
    ``Scribe.routed_run_types`` inside a compiled cell loop (rows ``here`` at their RP, the
    others passing towards ``next_hop``): JOINs by :func:`on_join_routed` (``tree_sizes``
    advanced), CREATEs by :func:`on_create_routed` and MCASTs by :func:`on_mcast_routed`
    for those here (their forward upcall changes nothing; ``replicas``: the replica set
    of each row's node, :func:`replicas_wanted` of them). ``state``:
    ``Scribe.runs_state``. Returns (status, need, the deliveries -- for CREATEs the
    records of the groups created --, rows written, cursor)."""
    if m[0]["type"] == state[_S_JOIN]:
        st, need, w, cursor = on_join_routed(m, li, here, next_hop, state, tree_sizes, out,
                                             pool, cursor, s_hr, s_rdist, s_lan)
        return st, need, np.empty(0, m.dtype), w, cursor
    sel = np.flatnonzero(here)
    if len(sel) == 0:
        return DONE, 0, np.empty(0, m.dtype), 0, cursor
    if m[0]["type"] == state[_S_CREATE]:
        return on_create_routed(m[sel], li[sel], replicas[sel], state, tree_sizes, out, pool,
                                cursor, s_hr, s_rdist, s_lan)
    return on_mcast_routed(m[sel], li[sel], state, out, pool, cursor, s_hr, s_rdist, s_lan)


@numba.njit(cache=True)
def create_routes_of(m, state):
    """``rendezvous_kernels.create_routes`` of CREATE_REQs ``m`` on ``Scribe.runs_state``:
    the CREATEs their creators route."""
    return create_routes(m, state[_S_CREATE], state[_S_KEY_HI], state[_S_KEY_LO])


@numba.njit(cache=True)
def replicas_wanted(type_, state):
    """How many replicas of each node the deliver upcall of a routed run of ``type_``
    takes (CREATE: ``RendezvousPoints.k``; the others none). ``state``:
    ``Scribe.runs_state``."""
    return state[_S_REPLICAS] if type_ == state[_S_CREATE] else 0


@numba.njit(cache=True)
def on_create_routed(m, li, replicas, state, tree_sizes, out, pool, cursor, s_hr, s_rdist,
                     s_lan):
    """CREATEs delivered at their RP (the deliver upcall, ``RendezvousPoints.on_create``):
    ``rendezvous_kernels.on_create`` with the RPs' ``replicas``, declining where a row
    would be refused, then with tree repair the first TICK timers of the nodes that now
    hold tree state (:func:`first_ticks_all`, ``TreeRepair.start_ticks`` after the
    handler). ``state``: ``Scribe.runs_state``. Returns (status, need, the records of the
    groups created, rows written, cursor)."""
    ticking, period = state[_S_TICKING], state[_S_PERIOD]
    none = np.empty(0, m.dtype)
    n_new = _tick_room(li, ticking, period)
    if len(out) < n_new:
        return MORE_ROOM, n_new + len(m), none, 0, cursor
    six, active = state[_S_SIX], state[_S_ACTIVE]
    refused = np.zeros(len(m), np.bool_)
    st, need, k, cursor = on_create(
        m, li, replicas, False, six, state[_S_N_GROUPS], tree_sizes, state[_S_SLOT_NODE],
        state[_S_GROUP], active, state[_S_ROOT], state[_S_ACL], state[_S_CREATOR],
        state[_S_KEY_HI], state[_S_KEY_LO], state[_S_REPLICA], refused,
        out[:len(out) - n_new], pool, cursor, s_hr, s_rdist, s_lan)
    if st != DONE:
        return st, need + n_new, none, 0, cursor
    k = first_ticks_all(m, li, six, active, ticking, state[_S_NODE_IDS], period,
                        state[_S_TICK], out, k, s_hr, s_rdist, s_lan)
    return DONE, 0, m.copy(), k, cursor


@numba.njit(cache=True)
def plan_join_requests(m, li, state, tree_sizes):
    """JOIN_REQs at their members (``TreeJoins.on_join_req``), looked at without writing:
    declined (False) where a request meets an active slot whose known ACL token differs
    from its credential (a refusal: the handler's path) or the tree lacks room for a
    slot per request. Else (True, the slot of each row or -1 for a key not yet in the
    index, each row's key, the rows whose request starts the node's JOIN -- the first
    request for a (node, group) not on the tree --, and that JOIN per such row as
    ``Router.route`` makes it at its origin: src = dst = origin = the member, the
    group's key, the credential and the slot's last seqno, mode 1). O(q)."""
    six, n_groups, active, acl = state[_S_SIX], state[_S_N_GROUPS], state[_S_ACTIVE], \
        state[_S_ACL]
    last_seq, key_hi, key_lo = state[_S_LAST_SEQ], state[_S_KEY_HI], state[_S_KEY_LO]
    n = len(m)
    s = np.empty(n, np.int64)
    keys = np.empty(n, np.int64)
    for i in range(n):
        if li[i] < 0:
            return False, s, keys, np.empty(0, np.int64), np.empty(0, m.dtype)
        keys[i] = np.int64(li[i]) * n_groups + np.int64(m[i]["group"])
        v = key_value(six, keys[i])
        s[i] = v
        if v >= 0 and active[v] and acl[v] >= 0 and m[i][_REQ_CREDENTIAL] != acl[v]:
            return False, s, keys, np.empty(0, np.int64), np.empty(0, m.dtype)
    if not slot_room(li, six, tree_sizes[0], active):
        return False, s, keys, np.empty(0, np.int64), np.empty(0, m.dtype)
    _, first = unique_first(keys)
    start = np.empty(len(first), np.int64)
    k = 0
    for i in first:     # (in row order)
        if s[i] < 0 or not active[s[i]]:
            start[k] = i
            k += 1
    start = np.sort(start[:k])
    joins = np.zeros(k, m.dtype)
    for j in range(k):
        r = m[start[j]]
        start_route(joins, j, r, state[_S_JOIN], key_hi, key_lo)
        joins[j][_JOIN_CREDENTIAL] = r[_REQ_CREDENTIAL]
        joins[j][_JOIN_LAST_SEQ] = last_seq[s[start[j]]] if s[start[j]] >= 0 else -1
    return True, s, keys, start, joins


@numba.njit(cache=True)
def write_join_requests(m, li, state, tree_sizes, start):
    """The writes of :func:`plan_join_requests`' requests: every row's slot found or made
    (row order), a member with its credential (the last row of a slot written last), and
    the starting rows' slots on the tree as forwarders (``TreeJoins._activate``: no
    parent, the JOIN's credential); ``tree_sizes`` advanced. O(q)."""
    member, my_cred = state[_S_MEMBER], state[_S_MY_CRED]
    active, parent, join_cred = state[_S_ACTIVE], state[_S_PARENT], state[_S_JOIN_CRED]
    s = slots_of(m, li, state[_S_SIX], state[_S_N_GROUPS], tree_sizes, state[_S_SLOT_NODE],
                 state[_S_GROUP])
    for i in range(len(m)):
        member[s[i]] = True
        my_cred[s[i]] = m[i][_REQ_CREDENTIAL]
    for i in start:
        active[s[i]] = True
        parent[s[i]] = -1
        join_cred[s[i]] = m[i][_REQ_CREDENTIAL]


@numba.njit(cache=True)
def joins_accepted(m, li, here, state, tree_sizes, more_slots):
    """Whether :func:`on_join_routed` would take JOINs ``m`` (rows ``here`` at their RP)
    after ``more_slots`` further slots are made: the RP accepts the delivered ones, a
    passing one meets no refusal, and the tree has room. Writes nothing. O(q)."""
    six, n_groups, active = state[_S_SIX], state[_S_N_GROUPS], state[_S_ACTIVE]
    if not _tree_room(li, here, six, tree_sizes[0] + more_slots, state[_S_EIX],
                      tree_sizes[1], active, state[_S_VALID]):
        return False
    join_type, root, acl = state[_S_JOIN], state[_S_ROOT], state[_S_ACL]
    st, _, _ = _at_rp_check(m, li, here, six, n_groups, root, acl, join_type)
    if st != DONE:
        return False
    st, _, _, _, _ = _forward_check(m, li, ~here, six, n_groups, active, state[_S_PARENT],
                                    acl, join_type)
    return st == DONE


@numba.njit(cache=True)
def first_ticks_of(m, li, state, out, k, s_hr, s_rdist, s_lan):
    """:func:`first_ticks_all` on ``Scribe.runs_state``. Returns the next row."""
    return first_ticks_all(m, li, state[_S_SIX], state[_S_ACTIVE], state[_S_TICKING],
                           state[_S_NODE_IDS], state[_S_PERIOD], state[_S_TICK], out, k,
                           s_hr, s_rdist, s_lan)


# ``Scribe.runs_state``'s fields, in its order: on_runs takes the tuple apart whole (into
# these names), the kernels that read a few of its fields read them at these places
RUNS_STATE = (
    "ticking", "node_ids", "six", "eix", "n_groups", "n_nodes", "max_hops", "active", "root",
    "parent", "member", "last_heard", "last_seq", "last_sent", "slot_node", "n_children",
    "node_children", "group", "join_cred", "valid", "child", "refresh", "e_slot", "e_cred",
    "key_hi", "key_lo", "stale", "period", "silent_after", "stale_after", "data_type",
    "tick_type", "heartbeat_type", "refresh_type", "leave_type", "rejoin_type", "acl",
    "join_ack_type", "mcast_type", "rp_addr_type", "rp_cache", "rp_cache_time", "join_type",
    "my_cred", "reset_cols", "collapse_wave_type", "adopt_type", "creator", "rep_acl",
    "rep_creator", "create_type", "replica_type", "replicas")
_S_TICKING, _S_NODE_IDS, _S_SIX, _S_EIX, _S_N_GROUPS, _S_N_NODES, _S_ACTIVE, _S_ROOT, \
    _S_PARENT, _S_MEMBER, _S_LAST_SEQ, _S_LAST_SENT, _S_SLOT_NODE, _S_N_CHILDREN, \
    _S_NODE_CHILDREN, _S_GROUP, _S_JOIN_CRED, _S_VALID, _S_CHILD, _S_REFRESH, _S_E_SLOT, \
    _S_E_CRED, _S_KEY_HI, _S_KEY_LO, _S_PERIOD, _S_DATA, _S_TICK, _S_ACL, _S_JOIN_ACK, \
    _S_MCAST, _S_RP_ADDR, _S_JOIN, _S_MY_CRED, _S_CREATOR, _S_CREATE, _S_REPLICA, \
    _S_REPLICAS = (RUNS_STATE.index(f) for f in (
        "ticking", "node_ids", "six", "eix", "n_groups", "n_nodes", "active", "root",
        "parent", "member", "last_seq", "last_sent", "slot_node", "n_children",
        "node_children", "group", "join_cred", "valid", "child", "refresh", "e_slot",
        "e_cred", "key_hi", "key_lo", "period", "data_type", "tick_type", "acl",
        "join_ack_type", "mcast_type", "rp_addr_type", "join_type", "my_cred", "creator",
        "create_type", "replica_type", "replicas"))


@numba.njit(cache=True)
def on_rp_addr(m, li, six, n_groups, rp_cache, rp_cache_time, rp_addr_type):
    """RP_ADDR without the reliable layer (``Dissemination.on_rp_addr``): each source
    caches its group's RP address and when it heard it (of rows of one slot, the last
    written last). Declines, changing nothing, where a row is not a direct RP_ADDR for a
    node of this shard or its node has no slot for the group (the handler makes one).
    Sends nothing. Returns the status. O(rows)."""
    n = len(m)
    s = np.empty(n, np.int64)
    for i in range(n):
        r = m[i]
        if li[i] < 0 or r["mode"] != 0 or r["type"] != rp_addr_type:
            return DECLINED
        v = key_value(six, np.int64(li[i]) * n_groups + np.int64(r["group"]))
        if v < 0:
            return DECLINED
        s[i] = v
    for i in range(n):
        rp_cache[s[i]] = m[i][_RP]
        rp_cache_time[s[i]] = m[i]["time"]
    return DONE


@numba.njit(cache=True)
def on_refresh(m, li, six, eix, n_groups, n_nodes, active, slot_node, n_children,
               node_children, e_slot, e_child, e_valid, e_cred, e_refresh, key_hi, key_lo,
               refresh_type, rejoin_type, out, pool, cursor, s_hr, s_rdist, s_lan):
    """A REFRESH cell whose (slot, child) entries all exist in the entry index
    (``TreeRepair.on_refresh``'s case without the reliable layer): every row with an active slot
    refreshes its entry (slot, child, credential, time; the last row of an entry written
    last), an entry that was not valid becomes a child again (counted once, at its first
    row); a row whose node has no state for the group tells the child to join again
    (REJOIN). Rows: one per message at most. O(q)."""
    n = len(m)
    if not direct_rows(m, li, refresh_type):
        return DECLINED, 0, 0, cursor
    s = np.empty(n, np.int64)
    e = np.empty(n, np.int64)
    live = np.empty(n, np.int64)
    k = 0
    for i in range(n):
        v = key_value(six, np.int64(li[i]) * n_groups + np.int64(m[i]["group"]))
        if v < 0 or not active[v]:
            continue
        x = key_value(eix, np.int64(v) * n_nodes + np.int64(m[i]["src"]))
        if x < 0:
            return DECLINED, 0, 0, cursor
        live[k] = i
        s[k] = v
        e[k] = x
        k += 1
    if n - k > len(out):
        return MORE_ROOM, n - k, 0, cursor
    zero_rows(out, np.int64(0), n - k)
    live = live[:k]
    for j in range(k):
        r = m[live[j]]
        write_child(e[j], s[j], r["src"], r[_CREDENTIAL], r["time"], e_valid, e_slot,
                    e_child, e_cred, e_refresh, n_children, node_children, slot_node)
    w = np.int64(0)
    j = 0
    for i in range(n):
        if j < k and live[j] == i:
            j += 1
            continue
        r = m[i]
        put_send(out, w, r["dst"], r["src"], rejoin_type, r["time"], s_hr, s_rdist, s_lan)
        put_group(out, w, r["group"], key_hi, key_lo)
        w += 1
    return DONE, 0, w, cursor


@numba.njit(cache=True)
def on_heartbeat(m, li, six, n_groups, active, parent, last_heard, key_hi, key_lo,
                 heartbeat_type, leave_type, out, pool, cursor, s_hr, s_rdist, s_lan):
    """A HEARTBEAT cell without root paths (``TreeRepair.on_heartbeat``): a heartbeat from
    the parent of the receiving node's active slot resets its suspicion clock
    (``last_heard``, row order); one from another node that the receiver does not count as
    its parent -- it has no state for the group, or another parent -- is answered with a
    LEAVE (a former parent still counts it as a child). Rows: one per message at most.
    O(q)."""
    st = _one_send_per_row(m, li, heartbeat_type, out)
    if st != DONE:
        return st, len(m) if st == MORE_ROOM else 0, 0, cursor
    w = np.int64(0)
    for i in range(len(m)):
        r = m[i]
        v = active_slot(six, n_groups, active, li[i], r["group"])
        if heard_parent(v, r["src"], r["time"], active, parent, last_heard):
            continue
        if v < 0 or parent[v] >= 0:
            _put_leave(out, w, r, leave_type, key_hi, key_lo, s_hr, s_rdist, s_lan)
            w += 1
    return DONE, 0, w, cursor


@numba.njit(cache=True)
def on_join_ack(m, li, six, n_groups, active, parent, last_heard, acl, key_hi, key_lo,
                join_ack_type, leave_type, out, pool, cursor, s_hr, s_rdist, s_lan):
    """A JOIN_ACK cell without the reliable layer and root paths (``TreeJoins.on_join_ack``):
    a node whose slot for the group is active takes the sender as its parent, hears from it
    now (``last_heard``) and learns the group's ACL token when the ack carries one (>= 0),
    row by row (a later ack for the same slot wins, as numpy's assignment); a node that
    left the tree meanwhile answers with a LEAVE, in row order. Rows: one per message at
    most. O(q)."""
    st = _one_send_per_row(m, li, join_ack_type, out)
    if st != DONE:
        return st, len(m) if st == MORE_ROOM else 0, 0, cursor
    w = np.int64(0)
    for i in range(len(m)):
        r = m[i]
        v = active_slot(six, n_groups, active, li[i], r["group"])
        if v >= 0:
            parent[v] = r["src"]
            last_heard[v] = r["time"]
            if r[_ACL] >= 0:
                acl[v] = r[_ACL]
        else:
            _put_leave(out, w, r, leave_type, key_hi, key_lo, s_hr, s_rdist, s_lan)
            w += 1
    return DONE, 0, w, cursor


@numba.njit(cache=True)
def _adopt(out, w, r, v, eix, n_nodes, e_size, valid, e_slot, e_child, e_cred, e_refresh,
           n_children, node_children, slot_node, acl, last_seq, key_hi, key_lo,
           join_ack_type, s_hr, s_rdist, s_lan):
    """Slot v (of r's receiver) adopts r's sender (a JOIN row): the (slot, child) entry
    is found or added and written (``kernels.write_child``: counted where it was not
    valid), and row w of out becomes the JOIN_ACK with the slot's ACL
    token and last seqno (``TreeJoins.adopt_children`` for one row, without the reliable
    layer, root paths and a shaper). Returns the entry index's new size. O(1) expected."""
    src = r["src"]
    x, _, e_size = insert_key(eix, n_nodes, e_size, np.int64(v) * n_nodes + np.int64(src))
    write_child(np.int64(x), v, src, r[_JOIN_CREDENTIAL], r["time"], valid, e_slot, e_child, e_cred,
                e_refresh, n_children, node_children, slot_node)
    put_send(out, w, r["dst"], src, join_ack_type, r["time"], s_hr, s_rdist, s_lan)
    put_group(out, w, r["group"], key_hi, key_lo)
    out[w][_ACL] = acl[v]
    out[w][_PARENT_SEQ] = last_seq[v]
    return e_size


@numba.njit(cache=True)
def _forward_check(m, li, sel, six, n_groups, active, parent, acl, join_type):
    """The check of the passing rows of :func:`on_routed_joins` (mask ``sel``), writing nothing:
    (status, the JOIN rows (not a node's own), their slot was active, they are accepted
    (not from the slot's own parent), how many are)."""
    n = len(m)
    is_join = np.zeros(n, np.bool_)
    was = np.zeros(n, np.bool_)
    ok = np.zeros(n, np.bool_)
    n_ok = 0
    for i in range(n):
        r = m[i]
        if not sel[i] or r["type"] != join_type or r["src"] == r["dst"]:
            continue
        if li[i] < 0 or r["src"] < 0:
            return DECLINED, is_join, was, ok, 0
        is_join[i] = True
        v = active_slot(six, n_groups, active, np.int64(li[i]), r["group"])
        if v >= 0:
            if acl[v] >= 0 and r[_JOIN_CREDENTIAL] != acl[v]:
                return DECLINED, is_join, was, ok, 0
            was[i] = True
            if parent[v] == r["src"]:
                continue
        ok[i] = True
        n_ok += 1
    return DONE, is_join, was, ok, n_ok


@numba.njit(cache=True)
def _forward_write(m, li, next_hop, is_join, was, ok, six, n_groups, slot_size, eix, n_nodes,
                   entry_size, slot_node, slot_group, active, parent, acl, join_cred,
                   last_seq, n_children, node_children, valid, e_slot, e_child, e_cred,
                   e_refresh, key_hi, key_lo, join_ack_type, out, w, s_hr, s_rdist, s_lan):
    """The writes of the passing rows of :func:`on_routed_joins` (rows of out from w on, zeroed
    by the caller). Returns (slot size, entry size, next row of out)."""
    n = len(m)
    s = np.full(n, -1, np.int64)
    for i in range(n):
        if is_join[i]:
            g = m[i]["group"]
            v, new, slot_size = insert_key(six, n_groups, slot_size,
                                           np.int64(li[i]) * n_groups + np.int64(g))
            if new:
                slot_node[v] = li[i]
                slot_group[v] = g
            s[i] = v
    # a forwarder starts at the first accepted row of its slot (as first_of_slot_among)
    cont = np.zeros(n, np.bool_)
    _, first = unique_first(np.where(ok, s, -1 - np.arange(n)))
    for i in first:
        if ok[i] and not was[i]:
            cont[i] = True
            v = s[i]
            active[v] = True
            parent[v] = -1
            join_cred[v] = m[i][_JOIN_CREDENTIAL]
    for i in range(n):
        if ok[i]:
            entry_size = _adopt(out, w, m[i], s[i], eix, n_nodes, entry_size, valid, e_slot,
                                e_child, e_cred, e_refresh, n_children, node_children,
                                slot_node, acl, last_seq, key_hi, key_lo, join_ack_type,
                                s_hr, s_rdist, s_lan)
            w += 1
    for i in range(n):
        if cont[i]:      # the JOIN goes on as this node's own
            m[i]["origin"] = m[i]["dst"]
            m[i]["hops"] = 0
            m[i]["path_us"] = 0
        elif is_join[i]:
            next_hop[i] = -1
    return slot_size, entry_size, w


@numba.njit(cache=True)
def _at_rp_check(m, li, sel, six, n_groups, root, acl, join_type):
    """The check of the delivered rows of :func:`on_routed_joins` (mask ``sel``), writing nothing:
    (status, each row's RP slot, how many rows come from another node)."""
    n = len(m)
    s = np.full(n, -1, np.int64)
    n_remote = 0
    for i in range(n):
        if not sel[i]:
            continue
        r = m[i]
        if li[i] < 0 or r["type"] != join_type or r["src"] < 0:
            return DECLINED, s, 0
        v = key_value(six, np.int64(li[i]) * n_groups + np.int64(r["group"]))
        if v < 0 or not root[v] or acl[v] < 0 or r[_JOIN_CREDENTIAL] != acl[v]:
            return DECLINED, s, 0
        s[i] = v
        n_remote += r["src"] != r["dst"]
    return DONE, s, n_remote


@numba.njit(cache=True)
def _at_rp_write(m, s, eix, n_nodes, entry_size, active, acl, last_seq, slot_node, n_children,
                 node_children, valid, e_slot, e_child, e_cred, e_refresh, key_hi, key_lo,
                 join_ack_type, out, w, s_hr, s_rdist, s_lan):
    """The writes of the delivered rows of :func:`on_routed_joins`, for the rows with a slot
    (rows of out from w on, zeroed by the caller). Returns (entry size, next row)."""
    for i in range(len(m)):
        if s[i] >= 0:
            active[s[i]] = True
    for i in range(len(m)):
        if s[i] >= 0 and m[i]["src"] != m[i]["dst"]:
            entry_size = _adopt(out, w, m[i], s[i], eix, n_nodes, entry_size, valid, e_slot,
                                e_child, e_cred, e_refresh, n_children, node_children,
                                slot_node, acl, last_seq, key_hi, key_lo, join_ack_type,
                                s_hr, s_rdist, s_lan)
            w += 1
    return entry_size, w


@numba.njit(cache=True)
def on_routed_joins(m, li, here, next_hop, six, n_groups, slot_size, eix, n_nodes,
                    entry_size, slot_node, slot_group, active, root, parent, acl, join_cred,
                    last_seq, n_children, node_children, valid, e_slot, e_child, e_cred,
                    e_refresh, key_hi, key_lo, ticking, node_ids, period, join_type,
                    join_ack_type, tick_type, out, pool, cursor, s_hr, s_rdist, s_lan):
    """The JOIN path's compiled pass, without the reliable layer, root paths, a tree shaper
    and lazy growth: the rows of ``here`` are delivered at their RP (``Scribe.deliver``),
    the others pass their node (``Scribe.forward``), their sends in that order. One
    routing step (the overlay's ``routed`` upcall) has both; a deliver or a forward upcall
    alone has ``here`` all set or all clear (``TreeJoins``' three *_compiled methods).

    At the RP (``TreeJoins.on_join_at_rp``): the RP's slot becomes active and adopts every
    joiner but itself (an RP that joins its own group), with a JOIN_ACK each, in row
    order. Passing (``TreeJoins._forward``; rows of another type and a node's own JOIN,
    src == dst, are left alone): at each row's node y (from the previous hop p = src), y's
    slot for the group is found or made (row order, ``TreeState.get_or_make``); a JOIN
    from y's own parent (a loop) stops; the others make p a child of y, answered with a
    JOIN_ACK (row order); a slot that was not on the tree before the call becomes a
    forwarder at its first such row (active, no parent, the JOIN's credential), and that
    row's JOIN goes on as y's own (origin y, hops and path time 0); every other JOIN row
    stops here (``next_hop`` -1). With tree repair (``period`` > 0) each upcall's nodes
    that now hold tree state get their first TICK timer after its JOIN_ACKs
    (:func:`first_ticks`, as ``TreeRepair.start_ticks`` after each upcall).

    Both parts are checked before either writes (they touch different slots: a node
    routes every message for a key the same way). The call declines, before writing
    anything, where a row is not for a node of this shard, where a delivered row is not a
    JOIN for the group's root with a known ACL token equal to its credential, where a
    passing JOIN meets a node that knows the ACL and the credential is wrong (a refusal,
    a replica's take-over: the general path handles those), or where the tree lacks room
    for a slot per passing row and a child entry per row (``TreeState.make_room``, which
    the general path calls). Returns (status, need, the slot and entry indexes' new sizes,
    rows written, cursor). O(q log q)."""
    if not _tree_room(li, here, six, slot_size, eix, entry_size, active, valid):
        return DECLINED, 0, slot_size, entry_size, 0, cursor
    st, s, n_remote = _at_rp_check(m, li, here, six, n_groups, root, acl, join_type)
    if st != DONE:
        return st, 0, slot_size, entry_size, 0, cursor
    st, is_join, was, ok, n_ok = _forward_check(m, li, ~here, six, n_groups, active, parent,
                                                acl, join_type)
    if st != DONE:
        return st, 0, slot_size, entry_size, 0, cursor
    need = n_remote + n_ok
    need += _tick_room(li, ticking, period)
    if need > len(out):
        return MORE_ROOM, need, slot_size, entry_size, 0, cursor
    zero_rows(out, np.int64(0), need)
    entry_size, w = _at_rp_write(m, s, eix, n_nodes, entry_size, active, acl, last_seq,
                                 slot_node, n_children, node_children, valid, e_slot, e_child,
                                 e_cred, e_refresh, key_hi, key_lo, join_ack_type, out, np.int64(0),
                                 s_hr, s_rdist, s_lan)
    if period > 0:
        w = first_ticks(m, li, here, ticking, six, active, node_ids, period, tick_type, out, w,
                        s_hr, s_rdist, s_lan)
    slot_size, entry_size, w = _forward_write(
        m, li, next_hop, is_join, was, ok, six, n_groups, slot_size, eix, n_nodes, entry_size,
        slot_node, slot_group, active, parent, acl, join_cred, last_seq, n_children,
        node_children, valid, e_slot, e_child, e_cred, e_refresh, key_hi, key_lo,
        join_ack_type, out, w, s_hr, s_rdist, s_lan)
    if period > 0:
        w = first_ticks(m, li, is_join, ticking, six, active, node_ids, period, tick_type, out,
                        w, s_hr, s_rdist, s_lan)
    return DONE, 0, slot_size, entry_size, w, cursor


@numba.njit(cache=True)
def _tree_room(li, here, six, slot_size, eix, entry_size, active, valid):
    """Whether the tree takes :func:`on_routed_joins`' inserts without growing: a slot per
    passing row, a child entry per row, every row's node a prefix of the slot index."""
    n = len(li)
    n_passing = 0
    top = 0
    for i in range(n):
        n_passing += not here[i]
        top = max(top, li[i] + 1)
    return has_room(six, slot_size, n_passing, top) \
        and slot_size + n_passing <= len(active) \
        and has_room(eix, entry_size, n, slot_size + n_passing) \
        and entry_size + n <= len(valid)


@numba.njit(cache=True)
def first_ticks(m, li, sel, ticking, six, active, node_ids, period, tick_type, out, w,
                s_hr, s_rdist, s_lan):
    """``TreeRepair.start_ticks`` for the rows ``sel`` of ``m`` (local indexes ``li``):
    their nodes that are not ticking and hold an active slot start ticking, with a TICK
    timer one ``period`` after the latest of their rows' times, in local-index order,
    from row w of ``out`` on (zeroed). Returns the next row. O(q log q)."""
    n = len(m)
    cand = np.empty(n, np.int64)
    k = 0
    for i in range(n):
        if sel[i] and not ticking[li[i]]:
            cand[k] = li[i]
            k += 1
    if k == 0:
        return w
    nodes = np.unique(cand[:k])
    now = np.full(len(nodes), np.iinfo(np.int64).min, np.int64)
    for i in range(n):
        if sel[i] and not ticking[li[i]]:
            q = np.searchsorted(nodes, li[i])
            now[q] = max(now[q], m[i]["time"])
    for q in range(len(nodes)):
        x = nodes[q]
        if any_within(six, x, active):
            ticking[x] = True
            g = node_ids[x]
            put_send(out, w, g, g, tick_type, now[q] + period, s_hr, s_rdist, s_lan)
            w += 1
    return w


@numba.njit(cache=True)
def _tick_room(li, ticking, period):
    """Rows :func:`first_ticks` may write for nodes ``li``: one per row whose node is not
    ticking, none without tree repair (``period`` 0). O(q)."""
    n = 0
    if period > 0:
        for i in range(len(li)):
            n += li[i] >= 0 and not ticking[li[i]]
    return n


@numba.njit(cache=True)
def first_ticks_all(m, li, six, active, ticking, node_ids, period, tick_type, out, k, s_hr,
                    s_rdist, s_lan):
    """:func:`first_ticks` for every row of ``m`` (``TreeRepair.start_ticks`` after a
    handler), from row k of out on, which it zeroes (room: :func:`_tick_room`). Returns
    the next row. O(q log q)."""
    n_new = _tick_room(li, ticking, period)
    if n_new == 0:
        return k
    zero_rows(out, k, k + n_new)
    return first_ticks(m, li, np.ones(len(m), np.bool_), ticking, six, active, node_ids,
                       period, tick_type, out, k, s_hr, s_rdist, s_lan)


@numba.njit(cache=True)
def start_ticks(m, li, six, active, ticking, node_ids, period, tick_type, out, pool, cursor,
                s_hr, s_rdist, s_lan):
    """:func:`first_ticks_all` as a handler's pass (``TreeRepair.start_ticks``). Returns
    (DONE, 0, rows written, cursor)."""
    w = first_ticks_all(m, li, six, active, ticking, node_ids, period, tick_type, out,
                        np.int64(0), s_hr, s_rdist, s_lan)
    return DONE, 0, w, cursor


@numba.njit(cache=True)
def on_join_routed(m, li, here, next_hop, state, sizes, out, pool, cursor, s_hr, s_rdist,
                   s_lan):
    """JOINs at a routing step (rows ``here`` at their RP, the others passing towards
    ``next_hop``) inside a compiled cell loop: :func:`on_routed_joins` on
    ``Scribe.runs_state`` with the tree indexes' sizes in ``sizes`` (slots, entries;
    advanced). Returns (status, need, rows written, cursor)."""
    st, need, s_size, e_size, w, cursor = on_routed_joins(
        m, li, here, next_hop, state[_S_SIX], state[_S_N_GROUPS], sizes[0], state[_S_EIX],
        state[_S_N_NODES], sizes[1], state[_S_SLOT_NODE], state[_S_GROUP], state[_S_ACTIVE],
        state[_S_ROOT], state[_S_PARENT], state[_S_ACL], state[_S_JOIN_CRED],
        state[_S_LAST_SEQ], state[_S_N_CHILDREN], state[_S_NODE_CHILDREN], state[_S_VALID],
        state[_S_E_SLOT], state[_S_CHILD], state[_S_E_CRED], state[_S_REFRESH],
        state[_S_KEY_HI], state[_S_KEY_LO], state[_S_TICKING], state[_S_NODE_IDS],
        state[_S_PERIOD], state[_S_JOIN], state[_S_JOIN_ACK], state[_S_TICK], out, pool,
        cursor, s_hr, s_rdist, s_lan)
    if st == DONE:
        sizes[0] = s_size
        sizes[1] = e_size
    return st, need, w, cursor


@numba.njit(cache=True)
def on_runs(m, local, bounds, first, last, state, sizes, counts, out, pool, cursor, s_hr,
            s_rdist, s_lan):
    """Runs ``first..last-1`` of a cell pass (``m`` its records in dispatch order, ``local``
    each row's local index, run r = rows ``bounds[r]`` to ``bounds[r + 1]``, all of one
    type: DATA, TICK, HEARTBEAT, REFRESH, JOIN_ACK, MCAST, RP_ADDR, COLLAPSE_WAVE, ADOPT
    or REPLICA) in one call, each by its kernel (:func:`on_data`, :func:`on_tick`,
    :func:`on_heartbeat`, :func:`on_refresh`, :func:`on_join_ack`, :func:`on_mcast` for
    those sent directly, :func:`on_rp_addr`, ``collapse_kernels.on_collapse_wave`` and
    ``on_adopt``, ``rendezvous_kernels.on_replica``: the tree indexes' sizes ``sizes``
    advanced, the collapse counts in ``counts``),
    their sends one after the other in ``out``: what ``Scribe.receive_compiled`` does run
    by run, in the same order, each run's sends followed, with tree repair, by the first
    TICK timers of its nodes that now hold tree state (:func:`first_ticks`, as
    ``TreeRepair.start_ticks`` after every run but a TICK run). Stops at a run its kernel
    declines or lacks room for (nothing of it written: the caller hands it to the
    run-by-run path). Returns (first run not handled, its status -- DONE when none was
    refused --, the rows it asked for, the DATA run's no-state and hop-limit counts (-1:
    no DATA run handled), the deliveries as DATA records, in run order, rows written,
    cursor). ``state``: ``Scribe.runs_state`` (a tuple, taken
    apart here: a tuple spread into a call is copied first, a reference count more for
    each of its arrays).
    O(rows + children + sends)."""
    ticking, node_ids, six, eix, n_groups, n_nodes, max_hops, active, root, parent, member, \
        last_heard, last_seq, last_sent, slot_node, n_children, node_children, group, \
        join_cred, valid, child, refresh, e_slot, e_cred, key_hi, key_lo, stale, period, \
        silent_after, stale_after, data_type, tick_type, heartbeat_type, refresh_type, \
        leave_type, rejoin_type, acl, join_ack_type, mcast_type, rp_addr_type, rp_cache, \
        rp_cache_time, _, _, reset_cols, collapse_wave_type, adopt_type, _, rep_acl, \
        rep_creator, _, replica_type, _ = state
    w = 0
    status = DONE
    need = 0
    no_state = -1
    looping = 0
    delivered = np.empty(0, m.dtype)
    r = first
    while r < last:
        s, e = bounds[r], bounds[r + 1]
        mr = m[s:e]
        li = local[s:e]
        ty = mr[0]["type"]
        # room after the run's sends for its nodes' first TICK timers (a tick leaves every
        # node with tree state ticking)
        n_new = _tick_room(li, ticking, period) if ty != tick_type else 0
        if len(out) - w < n_new:
            status, need = MORE_ROOM, n_new + len(mr)
            break
        o = out[w:len(out) - n_new]
        if ty == data_type:
            st, nd, ns, lp, rows, k, cursor = on_data(
                mr, li, six, eix, n_groups, max_hops, active, parent, member, last_heard,
                last_seq, last_sent, valid, child, key_hi, key_lo, data_type, o, pool, cursor,
                s_hr, s_rdist, s_lan)
            if st == DONE:
                no_state, looping = ns, lp
                data_rows = np.empty(len(rows), m.dtype)
                for j in range(len(rows)):
                    data_rows[j] = mr[rows[j]]
                delivered = concat_rows(delivered, data_rows)
        elif ty == mcast_type:
            st, nd, got, k, cursor = on_mcast(
                mr, li, np.int64(0), six, eix, n_groups, active, root, acl, member, last_seq,
                last_sent, valid, child, key_hi, key_lo, mcast_type, data_type, rp_addr_type,
                o, pool, cursor, s_hr, s_rdist, s_lan)
            if st == DONE:
                delivered = concat_rows(delivered, got)
        elif ty == rp_addr_type:
            st = on_rp_addr(mr, li, six, n_groups, rp_cache, rp_cache_time, rp_addr_type)
            nd, k = 0, 0
        elif ty == tick_type:
            st, nd, k, cursor = on_tick(
                mr, li, node_ids, six, eix, n_groups, active, root, parent, last_heard,
                last_sent, valid, refresh, group, join_cred, child, key_hi, key_lo, stale,
                ticking, period, silent_after, stale_after, tick_type, refresh_type,
                heartbeat_type, o, pool, cursor, s_hr, s_rdist, s_lan)
        elif ty == heartbeat_type:
            st, nd, k, cursor = on_heartbeat(
                mr, li, six, n_groups, active, parent, last_heard, key_hi, key_lo,
                heartbeat_type, leave_type, o, pool, cursor, s_hr, s_rdist, s_lan)
        elif ty == refresh_type:
            st, nd, k, cursor = on_refresh(
                mr, li, six, eix, n_groups, n_nodes, active, slot_node, n_children,
                node_children, e_slot, child, valid, e_cred, refresh, key_hi, key_lo,
                refresh_type, rejoin_type, o, pool, cursor, s_hr, s_rdist, s_lan)
        elif ty == join_ack_type:
            st, nd, k, cursor = on_join_ack(
                mr, li, six, n_groups, active, parent, last_heard, acl, key_hi, key_lo,
                join_ack_type, leave_type, o, pool, cursor, s_hr, s_rdist, s_lan)
        elif ty == collapse_wave_type:
            st, nd, _, k, cursor = on_collapse_wave(
                mr, li, six, eix, n_groups, active, member, root, parent, n_children,
                node_children, slot_node, valid, child, reset_cols, key_hi, key_lo,
                collapse_wave_type, adopt_type, counts, o, pool, cursor, s_hr, s_rdist, s_lan)
        elif ty == adopt_type:
            st, nd, k, cursor = on_adopt(
                mr, li, six, eix, n_groups, n_nodes, sizes, active, slot_node, n_children,
                node_children, valid, e_slot, child, e_cred, refresh, adopt_type, counts, o,
                pool, cursor, s_hr, s_rdist, s_lan)
        elif ty == replica_type:
            st, nd, k, cursor = on_replica(
                mr, li, six, n_groups, sizes, slot_node, group, active, rep_acl, rep_creator,
                replica_type, o, pool, cursor, s_hr, s_rdist, s_lan)
        else:
            st, nd, k = DECLINED, 0, 0
        if st != DONE:
            status, need = st, nd + n_new
            break
        w += k
        r += 1
        if n_new:
            w = first_ticks_all(mr, li, six, active, ticking, node_ids, period, tick_type, out,
                                w, s_hr, s_rdist, s_lan)
    return r, status, need, no_state, looping, delivered, w, cursor
