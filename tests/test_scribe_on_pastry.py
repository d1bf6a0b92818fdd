"""Scribe on the real Pastry stack (oracle bootstrap) on the product's engine, at 1500 nodes:
the full overlay API path (route/send, forward/deliver/receive, bind, replica_set). Trees
equal the union of Pastry routes, one multicast reaches every member exactly once, leave
prunes, 1 and 3 shards give identical logs; repair and RP take-over with keep-alives."""

import numpy as np
import pytest

from actors.scribe import (
    create_requests,
    group_table,
    join_requests,
    leave_requests,
    multicast_requests,
)
from protocol_world import network, scribe_world

N, G = 1500, 30
JOIN_AT = 1_000_000   # after the creations have reached the RPs


@pytest.fixture(scope="module")
def scenario():
    rng = np.random.default_rng(8)
    sizes = np.maximum(np.floor(N * np.arange(1, G + 1) ** -1.25 + 0.5).astype(int), 11)
    creds = rng.integers(1, 10**9, G)
    table = group_table([f"t{r}" for r in range(G)], [f"c{r}" for r in range(G)],
                        creds, ranks=np.arange(1, G + 1), sizes=sizes)
    net = network(N, 200, 8, groups=table)
    members = [np.sort(rng.choice(N, size=s, replace=False)) for s in sizes]
    leavers = [rng.choice(m, size=len(m) // 3, replace=False) for m in members]
    runs = {}
    for k in (1, 3):
        w = scribe_world(net, k)
        w.inject(create_requests(np.arange(G) * 11 % N, np.arange(G), 0, creds))
        mem = np.concatenate(members)
        grp = np.concatenate([np.full(len(m), g) for g, m in enumerate(members)])
        w.inject(join_requests(mem, grp, JOIN_AT + (np.arange(len(mem)) * 7919) % 300_000,
                               creds[grp]))
        w.run()
        w.dump()
        rp = w.rendezvous(G)
        w.inject(multicast_requests(rp, np.arange(G), 3_000_000, creds, seqno=1))
        w.run()
        lv = np.concatenate(leavers)
        lg = np.concatenate([np.full(len(x), g) for g, x in enumerate(leavers)])
        w.inject(leave_requests(lv, lg, 4_000_000, creds[lg]))
        w.run()
        w.inject(multicast_requests(rp, np.arange(G), 5_000_000, creds, seqno=2))
        w.run()
        runs[k] = (w, rp)
    return table, members, leavers, runs


@pytest.mark.slow
def test_trees_multicast_and_leave_on_real_pastry(scenario):
    table, members, leavers, runs = scenario
    w, rp = runs[1]
    for g in range(G):
        expect = w.route_tree(members[g], table["id_hi"][g], table["id_lo"][g])
        assert {p for p, _ in expect} - {c for _, c in expect} == {int(rp[g])}
        assert w.tree_edges(g) == expect
    d = w.table("delivery")
    for g in range(G):
        one = (d["group"] == g) & (d["seqno"] == 1)
        assert np.array_equal(np.sort(d["member"][one]), members[g])
        two = (d["group"] == g) & (d["seqno"] == 2)
        assert np.array_equal(np.sort(d["member"][two]), np.setdiff1d(members[g], leavers[g]))
    r = w.table("route")
    assert len(r["hops"]) > 0 and r["hops"].mean() < np.ceil(np.log(N) / np.log(16))


@pytest.mark.slow
def test_identical_logs_for_one_and_three_shards(scenario):
    *_, runs = scenario
    out = []
    for k in (1, 3):
        w, _ = runs[k]
        assert w.shards == k
        d = w.table("delivery")
        te = w.table("tree_edge")
        o = np.lexsort((d["seqno"], d["member"], d["group"]))
        ot = np.lexsort((te["child"], te["group"]))
        out.append([d["member"][o], d["time"][o], d["hops"][o], te["parent"][ot],
                    te["child"][ot]])
    for a, b in zip(*out, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.slow
def test_repair_and_rp_takeover_on_real_pastry():
    rng = np.random.default_rng(9)
    g_n = 8
    creds = rng.integers(1, 10**9, g_n)
    table = group_table([f"r{r}" for r in range(g_n)], ["x"] * g_n, creds)
    members = [np.sort(rng.choice(600, size=25, replace=False)) for _ in range(g_n)]
    # heartbeats outlast a round trip of the 100-router network (<= ~300 ms)
    w = scribe_world(network(600, 100, 9, groups=table), 2,
                     scribe={"heartbeat_us": 200_000}, pastry={"keepalive_us": 100_000})
    w.inject(create_requests(np.arange(g_n), np.arange(g_n), 0, creds))
    mem = np.concatenate(members)
    grp = np.concatenate([np.full(len(m), g) for g, m in enumerate(members)])
    w.inject(join_requests(mem, grp, JOIN_AT + np.arange(len(mem)) * 97, creds[grp]))
    w.run(until=2_000_000)
    te = w.fresh_tree_edges()
    rp = w.rendezvous(g_n)
    fwd = np.setdiff1d(te["parent"], np.concatenate([mem, rp]))[:5]
    dead = np.r_[fwd, rp[0]]
    w.fail(dead)
    src = np.array([m[~np.isin(m, dead) & (m != rp[g])][0] for g, m in enumerate(members)])
    w.inject(multicast_requests(src, np.arange(g_n), 4_500_000, creds, seqno=7))
    w.run(until=5_500_000)
    assert w.counters.get("scribe_rp_takeovers", 0) >= 1
    d = w.table("delivery")
    for g in range(g_n):
        got = np.sort(d["member"][(d["group"] == g) & (d["seqno"] == 7)])
        assert np.array_equal(got, np.setdiff1d(members[g], dead)), g
