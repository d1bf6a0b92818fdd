"""The rendezvous points' CREATE and REPLICA, and the copies of an RP's record, as compiled
passes, the only implementation of each: ``rendezvous.RendezvousPoints`` runs them on a
cell's messages, the stack's compiled loop calls them (CREATE from a routed run at its
RPs, ``handler_kernels.on_create_routed``; REPLICA from ``handler_kernels.on_runs``).

A node's slot for a group is found or made as ``TreeState.get_or_make`` makes it (the
slot index's next value, in row order). The replica set of an RP (the k members of its
leaf set nearest it, ``Endpoint.replica_set``) is the overlay's: the caller hands it in.

Each kernel ends with the arguments ``ShardContext.send_compiled`` appends (out, pool,
cursor, host_router, router_dist, lan_us) and returns (status, need, ..., rows written,
cursor), as ``handler_kernels``' do; the rows lent are zeroed here.
"""

from __future__ import annotations

import numba
import numpy as np

from emulator.kernels import put_send, unique_first, zero_rows

from .kernel_rows import DECLINED, DONE, MORE_ROOM, direct_rows, put_group, start_route
from .keyindex import has_room, insert_key, key_value
from .types import Create, CreateReq, Replica

_CREDENTIAL = Create.credential
_REQ_CREDENTIAL = CreateReq.credential
_ACL = Replica.acl
_CREATOR = Replica.creator


@numba.njit(cache=True)
def slot_room(li, six, slot_size, active):
    """Whether the slot index and columns take a new slot per row of ``li`` (local nodes)
    without growing (``TreeState.make_room``). O(len(li))."""
    top = 0
    for i in range(len(li)):
        top = max(top, li[i] + 1)
    return has_room(six, slot_size, len(li), top) and slot_size + len(li) <= len(active)


@numba.njit(cache=True)
def slots_of(m, li, six, n_groups, sizes, slot_node, slot_group):
    """Each row's slot for its group at its node, made where there is none (from index
    size ``sizes[0]`` on, advanced), in row order: ``TreeState.get_or_make`` compiled.
    O(len(m))."""
    size = sizes[0]
    s = np.empty(len(m), np.int64)
    for i in range(len(m)):
        g = m[i]["group"]
        v, new, size = insert_key(six, n_groups, size, np.int64(li[i]) * n_groups + np.int64(g))
        if new:
            slot_node[v] = li[i]
            slot_group[v] = g
        s[i] = v
    sizes[0] = size
    return s


@numba.njit(cache=True)
def _replica_count(reps, rows):
    n = 0
    for i in rows:
        for c in range(reps.shape[1]):
            n += reps[i, c] >= 0
    return n


@numba.njit(cache=True)
def _put_replicas(out, w, rp, reps, time, group, acl, creator, key_hi, key_lo, replica_type,
                  s_hr, s_rdist, s_lan):
    """Rows w.. of out: RP ``rp``'s record of ``group`` (``acl``, ``creator``) to each of its
    replicas ``reps`` (-1: none), at ``time``. Returns the next row."""
    for d in reps:
        if d >= 0:
            put_send(out, w, rp, d, replica_type, time, s_hr, s_rdist, s_lan)
            put_group(out, w, group, key_hi, key_lo)
            out[w][_ACL] = acl
            out[w][_CREATOR] = creator
            w += 1
    return w


@numba.njit(cache=True)
def on_create(m, li, reps, refuse, six, n_groups, sizes, slot_node, slot_group, active, root,
              acl, creator, key_hi, key_lo, replica_type, refused, out, pool, cursor, s_hr,
              s_rdist, s_lan):
    """CREATEs delivered at their RP (``li``: each row's local node; ``reps``: the replica
    set of each row's node, -1 padded, one row each). The first row of each slot whose
    node is not yet the group's root with a known ACL token makes it so (active, root,
    the credential as the ACL token, the origin as the creator) and sends the record to
    each replica (REPLICA, at the row's time: by row, then replica); every other row is
    refused (``refused`` set). Every row's slot is found or made (``sizes[0]`` advanced).
    Declines (nothing written) where a row is not for a node of this shard, where the
    slot index lacks room for a slot per row (``TreeState.make_room``) or, unless
    ``refuse``, where a row would be refused. Returns (status, need, rows written,
    cursor). O(q log q + sends)."""
    n = len(m)
    for i in range(n):
        if li[i] < 0:
            return DECLINED, 0, 0, cursor
    if not slot_room(li, six, sizes[0], active):
        return DECLINED, 0, 0, cursor
    keys = np.empty(n, np.int64)
    for i in range(n):
        keys[i] = np.int64(li[i]) * n_groups + np.int64(m[i]["group"])
    creates = np.zeros(n, np.bool_)
    _, first = unique_first(keys)
    for j in first:
        v = key_value(six, keys[j])
        creates[j] = not (v >= 0 and root[v] and acl[v] >= 0)
    made = np.flatnonzero(creates)
    if not refuse and len(made) < n:
        return DECLINED, 0, 0, cursor
    need = _replica_count(reps, made)
    if need > len(out):
        return MORE_ROOM, need, 0, cursor
    zero_rows(out, np.int64(0), need)
    s = slots_of(m, li, six, n_groups, sizes, slot_node, slot_group)
    for i in range(n):
        refused[i] = not creates[i]
    w = np.int64(0)
    for i in made:
        r, v = m[i], s[i]
        active[v] = True
        root[v] = True
        acl[v] = r[_CREDENTIAL]
        creator[v] = r["origin"]
        w = _put_replicas(out, w, r["dst"], reps[i], r["time"], r["group"], acl[v],
                          creator[v], key_hi, key_lo, replica_type, s_hr, s_rdist, s_lan)
    return DONE, 0, w, cursor


@numba.njit(cache=True)
def replicate(slots, rp, reps, times, slot_group, acl, creator, key_hi, key_lo, replica_type,
              out, pool, cursor, s_hr, s_rdist, s_lan):
    """The records of root ``slots`` (at global nodes ``rp``) to the replicas ``reps`` of
    each (one row each, -1 padded), at ``times``: by slot, then replica. Returns (status,
    need, rows written, cursor). O(sends)."""
    need = _replica_count(reps, np.arange(len(slots)))
    if need > len(out):
        return MORE_ROOM, need, 0, cursor
    zero_rows(out, np.int64(0), need)
    w = np.int64(0)
    for i in range(len(slots)):
        v = slots[i]
        w = _put_replicas(out, w, rp[i], reps[i], times[i], slot_group[v], acl[v], creator[v],
                          key_hi, key_lo, replica_type, s_hr, s_rdist, s_lan)
    return DONE, 0, w, cursor


@numba.njit(cache=True)
def on_replica(m, li, six, n_groups, sizes, slot_node, slot_group, active, rep_acl,
               rep_creator, replica_type, out, pool, cursor, s_hr, s_rdist, s_lan):
    """REPLICAs at the nodes closest to their RP (``li``: each row's local node): each
    row's slot (found or made, ``sizes[0]`` advanced) keeps the record it carries, in row
    order. Declines (nothing written) unless every row is a direct REPLICA to a node of
    this shard, or where the slot index lacks room for a slot per row. Sends nothing.
    Returns (status, need, rows written, cursor). O(q)."""
    if not direct_rows(m, li, replica_type) or not slot_room(li, six, sizes[0], active):
        return DECLINED, 0, 0, cursor
    s = slots_of(m, li, six, n_groups, sizes, slot_node, slot_group)
    for i in range(len(m)):
        rep_acl[s[i]] = m[i][_ACL]
        rep_creator[s[i]] = m[i][_CREATOR]
    return DONE, 0, 0, cursor


@numba.njit(cache=True)
def create_routes(m, create_type, key_hi, key_lo):
    """The CREATE each CREATE_REQ of ``m`` routes from its creator (``on_create_req``), as
    ``Router.route`` makes it at its origin: src = dst = origin = the creator, the group's
    key, the credential, mode 1. O(q)."""
    out = np.zeros(len(m), m.dtype)
    for i in range(len(m)):
        start_route(out, i, m[i], create_type, key_hi, key_lo)
        out[i][_CREDENTIAL] = m[i][_REQ_CREDENTIAL]
    return out
