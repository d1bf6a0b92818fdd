"""Scribe on the real Pastry stack (actors/pastry/protocol.py, oracle bootstrap), driven by
the Pastry tests' in-process engine: the full overlay API path (route/send, forward/deliver/
receive, bind, replica_set). Trees equal the union of Pastry routes, one multicast reaches
every member exactly once, leave prunes, K = 1 and K = 2 give identical logs."""

import numpy as np
import pytest

pastry_protocol = pytest.importorskip("actors.pastry.protocol")

from pastry_harness import World

from actors.pastry.oracle import oracle_state
from actors.pastry.routing import next_hop
from actors.pastry.synthetic import synthetic_network
from actors.scribe import (
    Scribe,
    create_requests,
    group_table,
    join_requests,
    leave_requests,
    multicast_requests,
)
from scenarios.config import protocol_params

N, G = 1500, 30


def complete_pastry(app, params):
    """Pastry with the scenario schema's defaults for the parameters not given."""
    return pastry_protocol.Pastry(app, protocol_params(pastry=params)[0])


def route_path(state, net, node, key_hi, key_lo):
    path = [int(node)]
    while True:
        nx, _ = next_hop(state, np.array([path[-1]]), np.array([path[-1]]),
                         np.array([key_hi], np.uint64), np.array([key_lo], np.uint64),
                         net["node_ids_hi"], net["node_ids_lo"])
        if nx[0] < 0:
            return path
        path.append(int(nx[0]))
        assert len(path) < 40


def inject(w, batch):
    m = batch.msgs.copy()
    w.post(m, None)


@pytest.fixture(scope="module")
def scenario():
    net = synthetic_network(N, 200, seed=8)
    rng = np.random.default_rng(8)
    sizes = np.maximum(np.floor(N * np.arange(1, G + 1) ** -1.25 + 0.5).astype(int), 11)
    creds = rng.integers(1, 10**9, G)
    net["groups"] = group_table([f"t{r}" for r in range(G)], [f"c{r}" for r in range(G)],
                                creds, ranks=np.arange(1, G + 1), sizes=sizes)
    members = [np.sort(rng.choice(N, size=s, replace=False)) for s in sizes]
    leavers = [rng.choice(m, size=len(m) // 3, replace=False) for m in members]
    runs = {}
    for k in (1, 2):
        w = World(net, lambda: complete_pastry(Scribe({}), {"bootstrap": "oracle"}),
                  shards=k)
        inject(w, create_requests(np.arange(G) * 11 % N, np.arange(G), 0, creds))
        w.run()
        mem = np.concatenate(members)
        grp = np.concatenate([np.full(len(m), g) for g, m in enumerate(members)])
        inject(w, join_requests(mem, grp, 100_000 + (np.arange(len(mem)) * 7919) % 300_000,
                                creds[grp]))
        w.run()
        for st, ctx in zip(w.stacks, w.ctxs):
            st.dump(ctx, "join")
        gt = {c: np.concatenate([p[c] for p in w.logs["group"]]) for c in ("group", "rp")}
        rp = np.full(G, -1)
        rp[gt["group"]] = gt["rp"]
        inject(w, multicast_requests(rp, np.arange(G), 2_000_000, creds, seqno=1))
        w.run()
        lv = np.concatenate(leavers)
        lg = np.concatenate([np.full(len(x), g) for g, x in enumerate(leavers)])
        inject(w, leave_requests(lv, lg, 3_000_000, creds[lg]))
        w.run()
        inject(w, multicast_requests(rp, np.arange(G), 4_000_000, creds, seqno=2))
        w.run()
        runs[k] = (w, rp)
    state = oracle_state(np.arange(N), net["node_ids_hi"], net["node_ids_lo"],
                         net["host_router"], net["router_dist_us"], net["lan_us"])
    return net, state, members, leavers, runs


def table(w, name):
    parts = w.logs.get(name, [])
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}


@pytest.mark.slow
def test_trees_multicast_and_leave_on_real_pastry(scenario):
    net, state, members, leavers, runs = scenario
    w, rp = runs[1]
    te = table(w, "tree_edge")
    gt = net["groups"]
    for g in range(G):
        expect = set()
        for m in members[g]:
            p = route_path(state, net, m, gt["id_hi"][g], gt["id_lo"][g])
            assert p[-1] == rp[g]
            expect.update((p[i + 1], p[i]) for i in range(len(p) - 1))
        sel = te["group"] == g
        assert set(zip(te["parent"][sel].tolist(), te["child"][sel].tolist())) == expect
    d = table(w, "delivery")
    for g in range(G):
        one = (d["group"] == g) & (d["seqno"] == 1)
        assert np.array_equal(np.sort(d["member"][one]), members[g])
        two = (d["group"] == g) & (d["seqno"] == 2)
        assert np.array_equal(np.sort(d["member"][two]), np.setdiff1d(members[g], leavers[g]))
    r = table(w, "route")
    assert len(r["hops"]) > 0 and r["hops"].mean() < np.ceil(np.log(N) / np.log(16))


@pytest.mark.slow
def test_identical_logs_for_one_and_two_shards(scenario):
    *_, runs = scenario
    out = []
    for k in (1, 2):
        w, _ = runs[k]
        d = table(w, "delivery")
        te = table(w, "tree_edge")
        o = np.lexsort((d["seqno"], d["member"], d["group"]))
        ot = np.lexsort((te["child"], te["group"]))
        out.append([d["member"][o], d["time"][o], d["hops"][o], te["parent"][ot],
                    te["child"][ot]])
    for a, b in zip(*out):
        assert np.array_equal(a, b)


@pytest.mark.slow
def test_repair_and_rp_takeover_on_real_pastry():
    net = synthetic_network(600, 100, seed=9)
    rng = np.random.default_rng(9)
    g_n = 8
    creds = rng.integers(1, 10**9, g_n)
    net["groups"] = group_table([f"r{r}" for r in range(g_n)], ["x"] * g_n, creds)
    members = [np.sort(rng.choice(600, size=25, replace=False)) for _ in range(g_n)]
    w = World(net, lambda: complete_pastry(
        Scribe({"heartbeat_us": 100_000}),
        {"bootstrap": "oracle", "keepalive_us": 100_000}), shards=2)
    inject(w, create_requests(np.arange(g_n), np.arange(g_n), 0, creds))
    mem = np.concatenate(members)
    grp = np.concatenate([np.full(len(m), g) for g, m in enumerate(members)])
    inject(w, join_requests(mem, grp, 100_000 + np.arange(len(mem)) * 97, creds[grp]))
    w.run(until=1_000_000)
    for st, ctx in zip(w.stacks, w.ctxs):
        st.dump(ctx, "join")
    te = table(w, "tree_edge")
    gt = table(w, "group")
    rp = np.full(g_n, -1)
    rp[gt["group"]] = gt["rp"]
    fwd = np.setdiff1d(te["parent"], np.concatenate([mem, rp]))[:5]
    dead = np.r_[fwd, rp[0]]
    w.fail(dead)
    src = np.array([m[~np.isin(m, dead) & (m != rp[g])][0] for g, m in enumerate(members)])
    inject(w, multicast_requests(src, np.arange(g_n), 4_000_000, creds, seqno=7))
    w.run(until=5_000_000)
    assert w.counters.get("scribe_rp_takeovers", 0) >= 1
    d = table(w, "delivery")
    for g in range(g_n):
        got = np.sort(d["member"][(d["group"] == g) & (d["seqno"] == 7)])
        assert np.array_equal(got, np.setdiff1d(members[g], dead)), g
