"""The product stack's compiled cell loop: Pastry's and Scribe's compiled handlers composed.

One numba kernel (:func:`run_cells`, emulator/window.py's contract) that takes each pass
whose runs are all of Pastry's or Scribe's compiled types: Pastry's runs first
(``actors.pastry.handler_kernels.on_runs``, then ``actors.pastry.cell_loop.took_runs``),
then Scribe's (``actors.scribe.cell_loop.take_runs``), as ``Pastry.handle_runs`` hands
them on. Composed here, statically, so numba caches it (a handler passed as a value would
be compiled again in every process).

A run of Scribe's routed messages passing a node is the common API in compiled form
(:func:`take_routed_run`): Pastry's routing step up to the upcalls, Scribe's deliver
upcall where they arrive (given the overlay's replica sets of their nodes where it takes
them: a CREATE's), the forward upcall, Pastry's hops -- for the types whose upcalls
Scribe has compiled (``Scribe.routed_run_types``: CREATE, MCAST, and JOIN where its path
is compiled).

Between the two parts the pass's changed leaf sets mark Scribe's rendezvous points
stale, which is what the ``new_leafs`` upcall does after Pastry's runs in the Python loop
(``RendezvousPoints.mark_stale``): a TICK later in the same call must see it.
"""

from __future__ import annotations

import numba
import numpy as np

from actors.pastry import cell_loop as pastry_loop
from actors.pastry.handler_kernels import on_runs, route_app_run, send_app_hops
from actors.pastry.kernels import HERE_APP
from actors.pastry.leafset import replica_sets
from actors.scribe import cell_loop as scribe_loop
from actors.scribe.handler_kernels import (
    DONE,
    MORE_ROOM,
    create_routes_of,
    first_ticks_of,
    joins_accepted,
    on_join_routed,
    on_routed_run,
    plan_join_requests,
    replicas_wanted,
    write_join_requests,
)
from actors.scribe.kernel_rows import direct_rows
from actors.scribe.types import CREATE_REQ
from emulator import window
from emulator.kernels import TYPE_OFFSET


@numba.njit(cache=True)
def take_routed_run(m, li, out, pool, cursor, acks_off, learn, joined, acks, tables, state,
                    factors, delivered, scribe_stats, tree_sizes, route_log, pastry_stats):
    """A run of MCASTs or JOINs routed through this node, from send ``cursor[0]`` on (the
    cursor advanced): Pastry's routing step up to the upcalls
    (``pastry.handler_kernels.route_app_run``: the hops acknowledged, next hops, route
    log rows), Scribe's deliver and forward upcalls (``scribe.handler_kernels.
    on_routed_run``; a JOIN run advances the tree's index sizes ``tree_sizes``), then
    the hops of those that go on (``send_app_hops``), as ``Router.receive`` and
    ``Router.step`` run them. The route log rows and deliveries go to the loop's buffers.
    Lent ``int(factors[type] * n)`` rows as ``take_runs`` lends a run; a run short of
    them is noted in ``scribe_stats`` (the factor then grows). Returns whether the run was
    taken (False: nothing done, the handlers' path takes it). O(the handlers' work)."""
    n = len(m)
    type_, rows, k0, o = _lent(m, factors, out, cursor)
    s_hr, s_rdist, s_lan = tables
    ok, mk, lk, na, nxt, kind, log, here, n_here, n_on = _routing_step(
        m, li, acks_off, learn, joined, acks, o, pool, tables)
    if not ok:
        return False
    if na + 2 * n_on > rows:
        _short(scribe_stats, type_, na + 2 * n_on + n_here, n)
        return False
    # the overlay's replica sets where the deliver upcall takes them (the common API's
    # ``replica_set``: Pastry's leaf sets)
    replicas = replica_sets(learn[1], lk, replicas_wanted(type_, state))
    st, need, got, kd, pos = on_routed_run(mk, lk, here, nxt, replicas, state, tree_sizes,
                                           o[na:rows - 2 * n_on], pool, cursor[1], s_hr,
                                           s_rdist, s_lan)
    if st == MORE_ROOM:
        _short(scribe_stats, type_, na + need + 2 * n_on, n)
    if st != DONE:
        return False
    kh = send_app_hops(mk, nxt, kind, acks_off, acks, o, na + kd, s_hr, s_rdist, s_lan)
    cursor[0] = k0 + na + kd + kh
    cursor[1] = pos
    _log_routes(log, route_log, pastry_stats)
    scribe_loop.gather_deliveries(got, delivered, scribe_stats)
    return True


@numba.njit(cache=True)
def take_join_request_run(m, li, out, pool, cursor, acks_off, learn, joined, acks, tables,
                          state, factors, scribe_stats, tree_sizes, route_log, pastry_stats):
    """A run of JOIN_REQs at their members, from send ``cursor[0]`` on (the cursor
    advanced), as ``TreeJoins.on_join_req`` and the route of the JOINs it starts run them:
    the requests' slots and members (``scribe.handler_kernels.write_join_requests``), each
    starting JOIN's first routing step at its member (``route_app_run``, no hop to
    acknowledge: the route log rows), its deliver and forward upcalls (``on_join_routed``:
    a member that is the group's RP joins there), its hop (``send_app_hops``), then the
    members' first TICK timers (``first_ticks``, ``TreeRepair.start_ticks``). Everything
    that could decline is looked at before anything is written
    (``plan_join_requests``, the RP's acceptance, the room). Lent
    ``int(factors[JOIN_REQ] * n)`` rows. Returns whether the run was taken (False:
    nothing done, the handlers' path takes it). O(the handlers' work)."""
    n = len(m)
    type_, rows, k0, o = _lent(m, factors, out, cursor)
    s_hr, s_rdist, s_lan = tables
    ok, _, _, start, joins = plan_join_requests(m, li, state, tree_sizes)
    if not ok:
        return False
    if len(start) == 0:   # (every request for a node already on the tree)
        if n > rows:
            _short(scribe_stats, type_, n, n)
            return False
        write_join_requests(m, li, state, tree_sizes, start)
        cursor[0] = k0 + first_ticks_of(m, li, state, o, np.int64(0), s_hr, s_rdist, s_lan)
        return True
    pending, pending_count = acks[0], acks[3]
    if not acks_off and pending_count[0] + len(start) > len(pending):
        return False   # (the handler's path makes the pending hops room)
    jli = np.empty(len(start), np.int64)
    for j in range(len(start)):
        jli[j] = li[start[j]]
    # (no hop arrived: none to acknowledge)
    ok, mk, lk, _, nxt, kind, log, here, _, n_on = _routing_step(
        joins, jli, np.bool_(True), learn, joined, acks, o, pool, tables)
    if not ok:
        return False
    if not joins_accepted(mk, lk, here, state, tree_sizes, n):
        return False
    need = len(mk) + 2 * n_on + n
    if need > rows:
        _short(scribe_stats, type_, need, n)
        return False
    write_join_requests(m, li, state, tree_sizes, start)
    _log_routes(log, route_log, pastry_stats)
    pos = cursor[1]
    st, _, kd, pos = on_join_routed(mk, lk, here, nxt, state, tree_sizes, o[:len(mk)], pool,
                                    pos, s_hr, s_rdist, s_lan)
    if st != DONE:
        raise ValueError("a JOIN accepted before its request was written was declined")
    kd += send_app_hops(mk, nxt, kind, acks_off, acks, o, kd, s_hr, s_rdist, s_lan)
    kd = first_ticks_of(m, li, state, o, kd, s_hr, s_rdist, s_lan)
    cursor[0] = k0 + kd
    cursor[1] = pos
    return True


@numba.njit(cache=True)
def take_create_request_run(m, li, out, pool, cursor, acks_off, learn, joined, acks, tables,
                            state, factors, delivered, scribe_stats, tree_sizes, route_log,
                            pastry_stats):
    """A run of CREATE_REQs at their creators, from send ``cursor[0]`` on (the cursor
    advanced), as ``RendezvousPoints.on_create_req`` and the route of the CREATEs it
    starts run them: each CREATE (``scribe.handler_kernels.create_routes_of``), its first
    routing step at its creator (``route_app_run``, no hop to acknowledge: the route log
    rows), its deliver upcall where the creator is the RP (``on_routed_run``, with the
    RP's replica set; the groups created go to ``delivered``), its hop
    (``send_app_hops``), then the creators' first TICK timers (``first_ticks_of``, as
    ``TreeRepair.start_ticks`` after the handler). Lent ``int(factors[CREATE_REQ] * n)``
    rows. Returns whether the run was taken (False: nothing done, the handlers' path takes
    it). O(the handlers' work)."""
    n = len(m)
    type_, rows, k0, o = _lent(m, factors, out, cursor)
    s_hr, s_rdist, s_lan = tables
    if not direct_rows(m, li, type_):
        return False
    pending, pending_count = acks[0], acks[3]
    if not acks_off and pending_count[0] + n > len(pending):
        return False   # (the handler's path makes the pending hops room)
    # (no hop arrived: none to acknowledge)
    ok, mk, lk, _, nxt, kind, log, here, _, n_on = _routing_step(
        create_routes_of(m, state), li, np.bool_(True), learn, joined, acks, o, pool, tables)
    if not ok:
        return False
    after = 2 * n_on + n     # the hops, their ACK_TIMERs, the creators' first ticks
    if after > rows:
        _short(scribe_stats, type_, after + len(mk), n)
        return False
    replicas = replica_sets(learn[1], lk, replicas_wanted(mk[0]["type"], state))
    st, need, got, kd, pos = on_routed_run(mk, lk, here, nxt, replicas, state, tree_sizes,
                                           o[:rows - after], pool, cursor[1], s_hr, s_rdist,
                                           s_lan)
    if st == MORE_ROOM:
        _short(scribe_stats, type_, need + after, n)
    if st != DONE:
        return False
    _log_routes(log, route_log, pastry_stats)
    kd += send_app_hops(mk, nxt, kind, acks_off, acks, o, kd, s_hr, s_rdist, s_lan)
    kd = first_ticks_of(m, li, state, o, kd, s_hr, s_rdist, s_lan)
    cursor[0] = k0 + kd
    cursor[1] = pos
    scribe_loop.gather_deliveries(got, delivered, scribe_stats)
    return True


@numba.njit(cache=True)
def _lent(m, factors, out, cursor):
    """The rows a run of ``m`` is lent, as ``take_runs`` lends a run: (its type, how many,
    where they start, the rows)."""
    type_ = m[0]["type"]
    rows = np.int64(factors[type_] * len(m))
    k0 = cursor[0]
    return type_, rows, k0, out[k0:k0 + rows]


@numba.njit(cache=True)
def _routing_step(m, li, acks_off, learn, joined, acks, out, pool, tables):
    """``route_app_run`` on routed messages ``m`` at their nodes, and of the messages it
    keeps: which are here (at their key's node), how many of them, and how many go on.
    Returns route_app_run's results, then those three."""
    s_hr, s_rdist, s_lan = tables
    ok, mk, lk, na, nxt, kind, log = route_app_run(m, li, acks_off, learn, joined, acks, out,
                                                  pool, s_hr, s_rdist, s_lan)
    here = np.empty(len(mk), np.bool_)
    n_here = 0
    n_on = 0
    for i in range(len(mk)):
        here[i] = kind[i] <= HERE_APP
        n_here += here[i]
        n_on += not here[i] and nxt[i] >= 0
    return ok, mk, lk, na, nxt, kind, log, here, n_here, n_on


@numba.njit(cache=True)
def _log_routes(log, route_log, pastry_stats):
    """Route log rows ``log`` to the loop's buffer (Pastry's part gathers it)."""
    q = pastry_stats[pastry_loop.N_ROUTE_LOG]
    for i in range(len(log)):
        route_log[q + i] = log[i]
    pastry_stats[pastry_loop.N_ROUTE_LOG] = q + len(log)


@numba.njit(cache=True)
def _short(stats, type_, need, count):
    """A run lent too few rows: noted for ``ScribeLoopPart.gathered`` (its factor grows)."""
    stats[scribe_loop.SHORT_TYPE] = type_
    stats[scribe_loop.SHORT_NEED] = need
    stats[scribe_loop.SHORT_COUNT] = count


@numba.njit(cache=True)
def run_cells(end, eng, taken, app_type, app_routed, app_requests, rows_per, ints_per,
              pastry_args, scribe_args, mark_stale, stale):
    """The cells before ``end``: each pass whose runs are all ``taken`` (``app_type``
    marks Scribe's, at ``code + TYPE_OFFSET``), Pastry's runs by its part, the nodes whose
    leaf set changed marked in ``stale`` (if ``mark_stale``), then Scribe's runs: those
    of direct messages by its part, a run of routed ones of a type ``app_routed`` marks
    by :func:`take_routed_run`, a run of requests of a type ``app_requests`` marks (their
    handler routes) by :func:`take_create_request_run` or :func:`take_join_request_run`.
    Returns (status, the pass handed back, its payload, whether it is in dispatch order,
    the run declined, sends written, payload cursor). O(the handlers' work + cells
    scanned)."""
    # taken apart once: a call takes a reference to every array it is passed, and a tuple
    # spread into a call (``*args``) is first copied, a reference to each of its arrays
    # more (emulator/window.py)
    (delta, meta, free, heap_t, heap_s, poff, plen, pay, head, nxt, rows, local_index, alive,
     seq, n_nodes, sent_counts, node_shard, n_shards, shard, out, pool, log_messages, log,
     outbox, outbox_shard, outbox_pay, new_types, lost_counts, c) = eng
    (acks_off, learn, joins, acks, seed, draws, run_rows, joined_room, run_counts, tables,
     route_log, changed_mask, changed, pastry_stats, runs_taken) = pastry_args
    s_hr, s_rdist, s_lan = tables
    state, factors, s_tables, delivered, scribe_stats, tree_sizes, counts = scribe_args
    sizes = window.buffer_sizes(out, pool, log, outbox, outbox_pay)
    # typed values, not literals: a literal argument is a further compile of the callee
    cell = np.int64(0)
    first = np.int64(0)
    in_cell = np.bool_(False)   # a further pass of ``cell`` is due (zero-delay self-messages)
    cursor = np.zeros(2, np.int64)
    while True:
        n_log, n_got = pastry_stats[pastry_loop.N_ROUTE_LOG], scribe_stats[scribe_loop.N_DELIVERED]
        room = min(len(route_log) - n_log, len(delivered) - n_got)
        half_full = 2 * n_log > len(route_log) or 2 * n_got > len(delivered)
        status, cell, m, payload, ordered, bounds, li = window.begin_pass(
            end, cell, in_cell, taken, rows_per, ints_per, 1, room, half_full, meta, free,
            heap_t, heap_s, poff, plen, pay, head, nxt, rows, delta, local_index, alive,
            lost_counts, sizes, c)
        if status >= 0:
            return status, m, payload, ordered, 0, 0, 0
        n_runs = len(bounds) - 1
        split = 0
        while split < n_runs and not app_type[np.int64(m[bounds[split]]["type"]) + TYPE_OFFSET]:
            split += 1
        cursor[:] = 0
        if split > 0:
            done, probes, nodes, plog, joined, k, pos = on_runs(
                m, payload, li, bounds, first, split, acks_off, learn, joins, acks, seed,
                draws, run_rows, joined_room, run_counts, out, pool, np.int64(0), s_hr,
                s_rdist, s_lan)
            cursor[0] = k
            cursor[1] = pos
            pastry_loop.took_runs(m, bounds, first, done, probes, nodes, plog, joined, route_log,
                                  changed_mask, changed, pastry_stats, runs_taken)
            if done < split:
                return window.PASS_PARTLY_DONE, m, payload, True, done, cursor[0], cursor[1]
            if mark_stale:
                for x in nodes:
                    stale[x] = True
        r = split
        while r < n_runs:
            if m[bounds[r]]["mode"] == 1:   # a run of routed messages
                if not app_routed[np.int64(m[bounds[r]]["type"]) + TYPE_OFFSET] \
                        or not take_routed_run(m[bounds[r]:bounds[r + 1]],
                                               li[bounds[r]:bounds[r + 1]], out, pool, cursor,
                                               acks_off, learn, joins[0], acks, tables, state,
                                               factors, delivered, scribe_stats, tree_sizes,
                                               route_log, pastry_stats):
                    return window.PASS_PARTLY_DONE, m, payload, True, r, cursor[0], cursor[1]
                r += 1
                continue
            if app_requests[np.int64(m[bounds[r]]["type"]) + TYPE_OFFSET]:
                # (chosen here: a kernel that only chose would be compiled with both
                # linked into it, one more time)
                mr, lr = m[bounds[r]:bounds[r + 1]], li[bounds[r]:bounds[r + 1]]
                if mr[0]["type"] == CREATE_REQ:
                    took = take_create_request_run(
                        mr, lr, out, pool, cursor, acks_off, learn, joins[0], acks, tables,
                        state, factors, delivered, scribe_stats, tree_sizes, route_log,
                        pastry_stats)
                else:
                    took = take_join_request_run(
                        mr, lr, out, pool, cursor, acks_off, learn, joins[0], acks, tables,
                        state, factors, scribe_stats, tree_sizes, route_log, pastry_stats)
                if not took:
                    return window.PASS_PARTLY_DONE, m, payload, True, r, cursor[0], cursor[1]
                r += 1
                continue
            e = r + 1   # a stretch of runs of direct messages
            while e < n_runs and m[bounds[e]]["mode"] != 1 \
                    and not app_requests[np.int64(m[bounds[e]]["type"]) + TYPE_OFFSET]:
                e += 1
            done, stop = scribe_loop.take_runs(m, li, bounds, r, e, out, pool, cursor,
                                               state, factors, s_tables, delivered,
                                               scribe_stats, tree_sizes, counts)
            if stop:
                return window.PASS_PARTLY_DONE, m, payload, True, done, cursor[0], cursor[1]
            r = e
        routed, in_cell = window.end_pass(
            cursor[0], cursor[1], c, out, pool, local_index, seq, n_nodes, sent_counts,
            new_types, log_messages, log, n_shards, node_shard, shard, outbox, outbox_shard,
            outbox_pay, meta, free, heap_t, heap_s, poff, plen, pay, rows, head, nxt, delta)
        if not routed:
            return window.PASS_UNROUTED, m, payload, True, n_runs, cursor[0], cursor[1]


class StackCellLoop:
    """``stack.run_cells`` of Pastry with Scribe: :func:`run_cells` over both parts."""

    def __init__(self, pastry, scribe, dtype: np.dtype):
        self.pastry = pastry.loop_part
        self.scribe = scribe_loop.ScribeLoopPart(scribe, dtype)
        self.taken = pastry_loop.taken_mask(self.pastry.types | self.scribe.types)
        self.app_type = pastry_loop.taken_mask(self.scribe.types)
        self.app_routed = pastry_loop.taken_mask(scribe.routed_run_types)
        self.app_requests = pastry_loop.taken_mask(scribe.request_run_types)
        size = max(len(self.pastry.run_rows), max(self.scribe.types) + 1)
        self.rows_per = np.zeros(size, np.float64)
        self.rows_per[:len(self.pastry.run_rows)] = self.pastry.run_rows
        self.ints_per = np.zeros(size, np.int64)
        self.ints_per[:len(self.pastry.run_ints)] = self.pastry.run_ints
        self.rendezvous = scribe.rendezvous

    def __call__(self, ctx, end: int, eng):
        self.scribe.factors(self.rows_per)
        return run_cells(end, eng, self.taken, self.app_type, self.app_routed,
                         self.app_requests, self.rows_per, self.ints_per,
                         self.pastry.inputs(ctx), self.scribe.inputs(ctx, self.rows_per),
                         bool(self.rendezvous.k), self.rendezvous.stale)

    def compile_ahead(self, ctx, eng) -> None:
        """Compile what :func:`run_cells` calls for a pass's application runs (Scribe's
        ``take_runs``, :func:`take_routed_run`, :func:`take_create_request_run`,
        :func:`take_join_request_run`) and at a pass's end (``window.end_pass``), for the
        types a call of this loop over the engine's arrays ``eng`` passes them; nothing
        runs. scenarios/warm.py has a second process do this while the first compiles the
        loop itself, whose compile then loads from the cache each part saved by the time
        it gets there (they are about half of it) and compiles the others too. In this
        order, the first process compiles least again: it gets to them after Pastry's
        part, which takes about as long as Scribe's part and the routed run together, and
        reaches Scribe's part, the largest, last. O(their compile, or their cache load)."""
        (acks_off, learn, joins, acks, _, _, _, _, _, tables, route_log, _, _, pastry_stats,
         _) = self.pastry.inputs(ctx)
        state, factors, s_tables, delivered, scribe_stats, tree_sizes, counts = \
            self.scribe.inputs(ctx, self.rows_per)
        t = numba.typeof
        m, ints = window.pass_types(eng)    # a pass (a run of it: a slice, the same type)
        i64 = numba.types.int64
        lent = (t(eng.out), t(eng.pool), ints, t(acks_off), t(learn), t(joins[0]), t(acks),
                t(tables), t(state), t(factors))
        ends = (t(scribe_stats), t(tree_sizes), t(route_log), t(pastry_stats))
        scribe_loop.take_runs.compile((m, ints, ints, i64, i64, t(eng.out), t(eng.pool), ints,
                                       t(state), t(factors), t(s_tables), t(delivered),
                                       t(scribe_stats), t(tree_sizes), t(counts)))
        take_routed_run.compile((m, ints, *lent, t(delivered), *ends))
        take_create_request_run.compile((m, ints, *lent, t(delivered), *ends))
        take_join_request_run.compile((m, ints, *lent, *ends))
        window.end_pass.compile(window.end_pass_types(eng))

    def gathered(self, ctx, extra_rows: int) -> None:
        self.pastry.gathered(ctx, extra_rows)
        self.scribe.gathered(ctx, extra_rows)

    @property
    def runs_taken(self) -> np.ndarray:
        return self.pastry.runs_taken
