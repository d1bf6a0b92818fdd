"""Tree repair on the real stack (LocalEmulator, Pastry with keep-alives and per-hop acks):
heartbeats, parent suspicion, re-join over real Pastry routes, RP replication and
take-over by the live node closest to the group id."""

import numpy as np
import pytest

from actors.scribe import multicast_requests
from protocol_world import (
    replica_set,
    root_of,
    run_without_loop,
    same_outcome,
    scribe_forget_replicas,
    scribe_new_leafs,
    scribe_replica_acl,
)
from test_scribe_tree import JOIN_AT, G, N, build, make_groups

# tree maintenance period: a child hears of its parent and the parent of its child once a
# round trip (up to ~300 ms here) has passed; three silent periods must outlast it
HB = 200_000
KEEPALIVE = 100_000  # Pastry leaf-set keep-alives: failed nodes are routed around
READY = JOIN_AT + 1_000_000   # trees built and heartbeats flowing


def start(shards, seed=41, params=None):
    """Trees of make_groups(6) built with repair on, run until READY.
    Returns (world, group table, credentials, members, RPs)."""
    table, creators, creds, members = make_groups(seed=6)
    w = build(seed, shards, table, creators, creds, members, until=READY,
              scribe={"heartbeat_us": HB, **(params or {})},
              pastry={"keepalive_us": KEEPALIVE})
    return w, table, creds, members, w.rendezvous(G)


def forwarders(w, members):
    """Tree nodes with children that are members of no group, from a fresh dump."""
    te = w.fresh_tree_edges()
    all_members = set(np.concatenate(members).tolist())
    return sorted(set(te["parent"].tolist()) - all_members)


@pytest.mark.parametrize("shards", [1, 3])
def test_repair_after_forwarder_and_root_failures(shards):
    w, table, creds, members, rp = start(shards)
    # stable: heartbeats flow, nothing repaired, members get a multicast
    w.inject(multicast_requests(rp, np.arange(G), READY + 100_000, creds, seqno=1))
    w.run(until=READY + 1_000_000)
    assert w.counters.get("scribe_repairs", 0) == 0
    assert w.counters.get("scribe_children_expired", 0) == 0
    d = w.table("delivery")
    for g in range(G):
        assert np.array_equal(np.sort(d["member"][(d["group"] == g) & (d["seqno"] == 1)]),
                              members[g])
    fwd = [f for f in forwarders(w, members) if f not in set(rp.tolist())][:8]
    dead = np.array(fwd + [int(rp[0])])
    w.fail(dead)
    # a member (not the RP) multicasts: its route finds the new RP after the take-over
    src = np.array([m[m != rp[g]][0] for g, m in enumerate(members)])
    src = np.where(np.isin(src, dead), np.array([m[-1] for m in members]), src)
    w.inject(multicast_requests(src, np.arange(G), READY + 2_000_000, creds, seqno=2))
    w.run(until=READY + 3_000_000)
    assert w.counters["scribe_repairs"] > 0
    assert w.counters["scribe_rp_takeovers"] >= 1
    d = w.table("delivery")
    for g in range(G):
        alive = np.setdiff1d(members[g], dead)
        got = np.sort(d["member"][(d["group"] == g) & (d["seqno"] == 2)])
        assert np.array_equal(got, alive), f"group {g}"
    # the new root of group 0 is the live node closest to its id
    te = w.fresh_tree_edges()
    sel = te["group"] == 0
    roots = set(te["parent"][sel].tolist()) - set(te["child"][sel].tolist())
    live = np.ones(N, bool)
    live[dead] = False
    assert roots == {int(root_of(w.net, table["id_hi"][0], table["id_lo"][0], live)[0])}
    assert not np.isin(te["parent"], dead).any()


def test_children_expire_without_refresh():
    w, _table, _creds, members, rp = start(1)
    # a member crashes silently: its parent drops it after child_expiry_miss periods
    victim = int(members[0][0] if members[0][0] != rp[0] else members[0][1])
    te = w.fresh_tree_edges()
    assert victim in te["child"][te["group"] == 0]
    w.fail([victim])
    w.run(until=READY + 1_000_000)
    assert w.counters["scribe_children_expired"] >= 1
    te = w.fresh_tree_edges()
    assert victim not in te["child"]


def test_new_leafs_refreshes_replicas_on_the_next_tick():
    w, _table, creds, members, rp = start(1)
    g = 0
    holders = replica_set(w, rp[g], 5)
    assert (scribe_replica_acl(w, holders, g) == creds[g]).all()
    # the RP's replicas are lost (say the replica holders were replaced)
    scribe_forget_replicas(w, holders, g)
    assert (scribe_replica_acl(w, holders, g) == -1).all()
    scribe_new_leafs(w, rp[g])
    w.run(until=READY + 2 * HB)  # a tick later the RP has re-sent its record
    assert (scribe_replica_acl(w, holders, g) == creds[g]).all()
    # and the replicas are what lets a new RP take over
    w.fail([rp[g]])
    src = members[g][members[g] != rp[g]][0]
    # after the take-over and the members' repairs (3 silent periods, then re-joins)
    w.inject(multicast_requests([src], [g], READY + 2_500_000, creds[g], seqno=5))
    w.run(until=READY + 3_500_000)
    d = w.table("delivery")
    got = np.sort(d["member"][(d["group"] == g) & (d["seqno"] == 5)])
    assert np.array_equal(got, np.setdiff1d(members[g], [rp[g]]))
    assert w.counters["scribe_rp_takeovers"] == 1


def repair_run(shards):
    """The failure scenario of the first test, with a third multicast from the sources
    that learnt their RP's address: every log row, counter and send count, and each
    shard's final tree state."""
    w, table, creds, members, rp = start(shards)
    w.inject(multicast_requests(rp, np.arange(G), READY + 100_000, creds, seqno=1))
    w.run(until=READY + 1_000_000)
    fwd = [f for f in forwarders(w, members) if f not in set(rp.tolist())][:8]
    w.fail(np.array(fwd + [int(rp[0])]))
    src = np.array([m[-1] for m in members])
    w.inject(multicast_requests(src, np.arange(G), READY + 2_000_000, creds, seqno=2))
    # again: the sources now hold their RP's address (RP_ADDR) and send directly
    w.inject(multicast_requests(src, np.arange(G), READY + 2_500_000, creds, seqno=3))
    w.run(until=READY + 3_000_000)
    w.dump()
    trees = [e.stack.app.tree.state() for e in w.emu.engines]
    return ({name: w.table(name) for name in ("message", "delivery", "tree_edge")},
            w.counters, w.sent, trees)


@pytest.mark.parametrize("shards", [1, 3])
def test_compiled_tick_and_data_steps_match_the_general_path(shards, monkeypatch):
    """Scribe's whole compiled passes (handler_kernels: TICK, HEARTBEAT, REFRESH, DATA,
    JOIN_ACK, MCAST sent directly, RP_ADDR, REPLICA), several runs of a pass at a time
    (handler_kernels.on_runs) or one by one, the compiled TICK step under the Python
    handler (TreeState.tick_plan) and the general numpy path send, log, count and leave
    in the tree state exactly the same, through failures, repairs, expiries and
    multicasts: every sent record byte for byte, pass by pass."""
    from actors.scribe.application import Scribe
    from actors.scribe.membership import TreeJoins
    from actors.scribe.tree import TreeState
    from actors.scribe.types import (
        DATA,
        HEARTBEAT,
        JOIN,
        JOIN_ACK,
        MCAST,
        REFRESH,
        REPLICA,
        RP_ADDR,
        TICK,
    )
    from emulator.engine import ShardEngine

    outcomes, plans, stretches = [], [], []
    real_whole, real_plan = Scribe.receive_compiled, TreeState.tick_plan
    real_runs = Scribe.receive_runs
    monkeypatch.setattr(Scribe, "receive_compiled", lambda self, ctx, t, b: outcomes.append(
        (int(t), real_whole(self, ctx, t, b))) or outcomes[-1][1])

    def receive_runs(self, ctx, m, payload, local, bounds, first, last):
        done = real_runs(self, ctx, m, payload, local, bounds, first, last)
        outcomes.extend((int(m["type"][bounds[r]]), True) for r in range(first, done))
        stretches.append(done - first)
        return done
    monkeypatch.setattr(Scribe, "receive_runs", receive_runs)
    # the JOIN path's compiled passes (both upcalls of a routing step, the forward upcall,
    # the JOIN at the RP)
    joins = {"routed": [], "forward": [], "at_rp": []}
    for name, real in (("routed", TreeJoins.routed_compiled),
                       ("forward", TreeJoins.forward_compiled),
                       ("at_rp", TreeJoins.at_rp_compiled)):
        monkeypatch.setattr(TreeJoins, f"{name}_compiled",
                            lambda self, *a, _n=name, _f=real: joins[_n].append(
                                _f(self, *a)) or joins[_n][-1])
    monkeypatch.setattr(TreeState, "tick_plan",
                        lambda self, *a: plans.append(real_plan(self, *a)) or plans[-1])
    real_route, emitted = ShardEngine._route, []   # every record sent, every field

    def route(self, m, payload):   # a handler pass's sends, all of them, before the stamp
        emitted.append((self.shard_id, m.tobytes(), payload.tobytes()))
        real_route(self, m, payload)
    monkeypatch.setattr(ShardEngine, "_route", route)

    def run():
        out = repair_run(shards)
        got, emitted[:] = list(emitted), []
        return (*out, got)

    # the stack's compiled cell loop (actors/stack_loop.py) takes whole passes without a
    # Python flush: its run is compared with the rest as a whole (logs, counters, sends,
    # trees), the passes below run it without the loop, pass by pass
    looped = run()
    for seen in (outcomes, plans, stretches, *joins.values()):
        seen.clear()
    fast = run_without_loop(monkeypatch, run)
    assert len(looped[4]) < 0.9 * len(fast[4])    # (the loop took passes: no flush)
    fast_logs, fast_counts = fast[0], fast[1]
    same_outcome(looped, fast)
    assert fast_counts["scribe_repairs"] > 0 and len(fast_logs["delivery"]["member"]) > 0
    assert len(fast[4]) > 100
    # every whole pass ran, and TICK cells that declined (a parent silent, a child stale
    # or an RP's replicas to refresh) went through the Python handler
    done = {t: [] for t in (TICK, HEARTBEAT, REFRESH, DATA, JOIN_ACK, MCAST, RP_ADDR,
                            REPLICA)}
    for t, ok in outcomes:
        if t in done:
            done[t].append(ok)
        else:   # a type without a whole pass
            assert not ok
    assert all(sum(done[t]) > 10 for t in (TICK, HEARTBEAT, REFRESH, DATA, JOIN_ACK)) \
        and sum(done[MCAST]) > 5 and sum(done[RP_ADDR]) > 5, \
        {t: (sum(v), len(v)) for t, v in done.items()}
    # the JOIN path's passes ran, and declined where the general path is needed
    assert sum(joins["routed"]) > 10 and sum(joins["forward"]) + sum(joins["at_rp"]) > 5, \
        {k: (sum(v), len(v)) for k, v in joins.items()}
    assert JOIN not in done

    assert not all(done[TICK]) and len(plans) > 0
    # several runs of a pass were taken in one call (Scribe.receive_runs), many times
    assert sum(k > 1 for k in stretches) > 10, stretches
    # the compiled TICK step under the Python handler, without the whole passes
    monkeypatch.setattr(Scribe, "receive_runs", lambda self, ctx, m, p, l, b, first, last: first)
    monkeypatch.setattr(Scribe, "receive_compiled", lambda self, ctx, t, b: False)
    for name in joins:
        monkeypatch.setattr(TreeJoins, f"{name}_compiled", lambda self, *a: False)
    plans.clear()
    steps = run()
    assert sum(p is not None for p in plans) > 100 and sum(p is None for p in plans) > 0
    # the general numpy path
    monkeypatch.setattr(TreeState, "tick_plan", lambda self, *a: None)
    general = run()
    for other in (steps, general):
        passes = other[4]
        assert len(passes) == len(fast[4])
        differ = [i for i, (a, b) in enumerate(zip(passes, fast[4], strict=True)) if a != b]
        assert not differ, f"{len(differ)} passes' sends differ, the first is {differ[:1]}"
        same_outcome(other, fast)


@pytest.mark.parametrize("shards", [1, 3])
def test_stack_one_by_one_gives_the_same_run(shards, monkeypatch):
    """``make_stack(..., one_by_one=True)`` (scenarios/warm.py's second run: every run to
    the handler of its type, no compiled cell loop, no ``handle_runs``) gives the
    product's run exactly: logs, counters, sends and trees."""
    import functools

    import protocol_world
    from actors.stack import make_stack
    from emulator.local import LocalEmulator

    ref = repair_run(shards)
    engines = []
    real_init = LocalEmulator.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        engines.extend(self.engines)
    monkeypatch.setattr(LocalEmulator, "__init__", init)
    monkeypatch.setattr(protocol_world, "make_stack",
                        functools.partial(make_stack, one_by_one=True))
    one_by_one = repair_run(shards)
    assert engines and all(e._loop is None and not e._run_types for e in engines)
    assert sum(e.python_events for e in engines) == sum(e.events for e in engines) > 0
    same_outcome(one_by_one, ref)

