"""Scribe over the real Pastry routing code (oracle-bootstrapped state, exact PNS) on a
synthetic network of a few thousand nodes: trees are the union of Pastry routes, loop-free,
every member reaches the RP, one multicast reaches every member exactly once, and K = 1
and K = 2 shards give identical results."""

import numpy as np
import pytest

pytest.importorskip("actors.pastry.oracle")
pytest.importorskip("actors.pastry.routing")

from scribe_harness import OracleOverlay, World

from actors.scribe import (
    Scribe,
    create_requests,
    group_table,
    join_requests,
    multicast_requests,
)

N, G = 4000, 60


@pytest.fixture(scope="module")
def setup():
    overlay = OracleOverlay(N, seed=5)
    rng = np.random.default_rng(5)
    sizes = np.maximum(np.floor(N * np.arange(1, G + 1) ** -1.25 + 0.5).astype(int), 11)
    creds = rng.integers(1, 10**9, G)
    table = group_table([f"topic{r}" for r in range(G)], [f"node{r}" for r in range(G)],
                        creds, ranks=np.arange(1, G + 1), sizes=sizes)
    members = [np.sort(rng.choice(N, size=s, replace=False)) for s in sizes]
    runs = {}
    for k in (1, 2):
        w = World(overlay, lambda: Scribe({}), shards=k, shared={"groups": table})
        w.inject(create_requests(np.arange(G) * 37 % N, np.arange(G), 0, creds))
        w.run()
        mem = np.concatenate(members)
        grp = np.concatenate([np.full(len(m), g) for g, m in enumerate(members)])
        w.inject(join_requests(mem, grp, 100_000 + (np.arange(len(mem)) * 7919) % 200_000,
                               creds[grp]))
        w.run()
        gt = w.table("group")
        rp = np.full(G, -1)
        rp[gt["group"]] = gt["rp"]
        w.dump()
        w.inject(multicast_requests(rp, np.arange(G), 5_000_000, creds))
        w.run()
        runs[k] = (w, rp)
    return overlay, table, members, runs


@pytest.mark.slow
def test_trees_are_union_of_pastry_routes(setup):
    overlay, table, members, runs = setup
    w, rp = runs[1]
    assert (rp == overlay.root(table["id_hi"], table["id_lo"])).all()
    te = w.table("tree_edge")
    hops = []
    for g in range(G):
        expect = set()
        for m in members[g]:
            path = overlay.route_path(m, table["id_hi"][g], table["id_lo"][g])
            hops.append(len(path) - 1)
            expect.update((path[i + 1], path[i]) for i in range(len(path) - 1))
        sel = te["group"] == g
        got = set(zip(te["parent"][sel].tolist(), te["child"][sel].tolist()))
        assert got == expect
        parent = {c: p for p, c in got}
        assert len(parent) == len(got)
        for m in members[g]:
            node, seen = int(m), set()
            while node != rp[g]:
                assert node not in seen
                seen.add(node)
                node = parent[node]
    assert np.mean(hops) < np.ceil(np.log(N) / np.log(16))


@pytest.mark.slow
def test_multicast_exactly_once_and_identical_across_shards(setup):
    _overlay, _table, members, runs = setup
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
    for a, b in zip(*cols):
        assert np.array_equal(a, b)
