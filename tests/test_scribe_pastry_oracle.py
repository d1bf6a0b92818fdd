"""Scribe on the real stack (oracle-bootstrapped Pastry, exact PNS) on a synthetic network
of 4000 nodes, on the product's engine: trees are the union of Pastry routes, loop-free,
every member reaches the RP (the node closest to the group id), one multicast reaches every
member exactly once, and 1 and 2 shards give identical results."""

import numpy as np
import pytest

from actors.scribe import create_requests, group_table, join_requests, multicast_requests
from protocol_world import network, root_of, scribe_world
from test_scribe_tree import assert_members_reach_root

N, G = 4000, 60
JOIN_AT = 1_000_000   # after the creations have reached the RPs


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(5)
    sizes = np.maximum(np.floor(N * np.arange(1, G + 1) ** -1.25 + 0.5).astype(int), 11)
    creds = rng.integers(1, 10**9, G)
    table = group_table([f"topic{r}" for r in range(G)], [f"node{r}" for r in range(G)],
                        creds, ranks=np.arange(1, G + 1), sizes=sizes)
    net = network(N, N // 8, 5, groups=table)
    members = [np.sort(rng.choice(N, size=s, replace=False)) for s in sizes]
    runs = {}
    for k in (1, 2):
        w = scribe_world(net, k)
        w.inject(create_requests(np.arange(G) * 37 % N, np.arange(G), 0, creds))
        mem = np.concatenate(members)
        grp = np.concatenate([np.full(len(m), g) for g, m in enumerate(members)])
        w.inject(join_requests(mem, grp, JOIN_AT + (np.arange(len(mem)) * 7919) % 200_000,
                               creds[grp]))
        w.run()
        rp = w.rendezvous(G)
        w.dump()
        w.inject(multicast_requests(rp, np.arange(G), 5_000_000, creds))
        w.run()
        runs[k] = (w, rp)
    return table, members, runs


@pytest.mark.slow
def test_trees_are_union_of_pastry_routes(setup):
    table, members, runs = setup
    w, rp = runs[1]
    assert (rp == root_of(w.net, table["id_hi"], table["id_lo"])).all()
    hops = []
    for g in range(G):
        path = w.routes(members[g], table["id_hi"][g], table["id_lo"][g])
        hops.append((path[:, 1:] >= 0).sum(axis=1))
        edges = w.tree_edges(g)
        assert edges == w.route_tree(members[g], table["id_hi"][g], table["id_lo"][g])
        assert_members_reach_root(edges, members[g], rp[g])
    assert np.concatenate(hops).mean() < np.ceil(np.log(N) / np.log(16))


@pytest.mark.slow
def test_multicast_exactly_once_and_identical_across_shards(setup):
    _table, members, runs = setup
    cols = []
    for k in (1, 2):
        w, _ = runs[k]
        d = w.table("delivery")
        for g in range(G):
            assert np.array_equal(np.sort(d["member"][d["group"] == g]), members[g])
        te = w.table("tree_edge")
        o = np.lexsort((te["child"], te["group"]))
        od = np.lexsort((d["member"], d["group"]))
        cols.append([te["group"][o], te["parent"][o], te["child"][o], d["member"][od],
                     d["time"][od], d["hops"][od]])
    for a, b in zip(*cols, strict=True):
        assert np.array_equal(a, b)
