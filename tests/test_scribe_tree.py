"""Scribe end to end on the harness overlay: create, join, multicast, leave, dump."""

import numpy as np
import pytest
from scribe_harness import Overlay, World

from actors.scribe import (
    Scribe,
    create_requests,
    group_table,
    join_requests,
    leave_requests,
    multicast_requests,
)

N = 500
G = 12


@pytest.fixture(scope="module")
def overlay():
    return Overlay(N, seed=7)


def make_groups(seed=3):
    rng = np.random.default_rng(seed)
    sizes = np.maximum((N * np.arange(1, G + 1) ** -1.25 + 0.5).astype(int) // 4, 3)
    names = [f"g{r}" for r in range(G)]
    creators = rng.integers(0, N, G)
    creds = rng.integers(1, 10**9, G)
    table = group_table(names, [f"node{c}" for c in creators], creds,
                        ranks=np.arange(1, G + 1), sizes=sizes)
    members = [np.sort(rng.choice(N, size=s, replace=False)) for s in sizes]
    return table, creators, creds, members


def reference_tree(overlay, table, g, members):
    """Expected tree: the union of the overlay routes from the members to the RP."""
    edges = set()
    for m in members:
        path = overlay.route_path(m, table["id_hi"][g], table["id_lo"][g])
        edges.update((int(path[i + 1]), int(path[i])) for i in range(len(path) - 1))
    return edges


def build(overlay, shards, table, creators, creds, members, t0=0):
    w = World(overlay, lambda: Scribe({}), shards=shards, shared={"groups": table})
    w.inject(create_requests(creators, np.arange(G), t0, creds))
    w.run()
    mem = np.concatenate(members)
    grp = np.concatenate([np.full(len(m), g) for g, m in enumerate(members)])
    times = t0 + 100_000 + (np.arange(len(mem)) * 997) % 50_000
    w.inject(join_requests(mem, grp, times, creds[grp]))
    w.run()
    return w


def rp_of(w):
    grp = w.table("group")
    rp = np.full(G, -1)
    rp[grp["group"]] = grp["rp"]
    return rp


def edges_of(w, g):
    te = w.table("tree_edge")
    sel = te["group"] == g
    return set(zip(te["parent"][sel].tolist(), te["child"][sel].tolist()))


def test_trees_equal_union_of_routes_and_multicast_reaches_members_once(overlay):
    table, creators, creds, members = make_groups()
    w = build(overlay, 1, table, creators, creds, members)
    rp = rp_of(w)
    assert (rp == overlay.root(table["id_hi"], table["id_lo"])).all()
    w.dump()
    for g in range(G):
        edges = edges_of(w, g)
        assert edges == reference_tree(overlay, table, g, members[g])
        parent = {c: p for p, c in edges}
        assert len(parent) == len(edges)  # one parent per child
        for m in members[g]:  # every member reaches the RP without a loop
            node, seen = int(m), set()
            while node != rp[g]:
                assert node not in seen
                seen.add(node)
                node = parent[node]
    w.inject(multicast_requests(rp, np.arange(G), 10_000_000, creds))
    w.run()
    d = w.table("delivery")
    for g in range(G):
        got = np.sort(d["member"][d["group"] == g])
        assert np.array_equal(got, members[g])  # exactly once each
    assert (d["time"] > d["publish_time"]).sum() >= len(d) - G  # the RP may be a member
    assert w.counters.get("scribe_data_no_state", 0) == 0


def test_identical_results_for_one_and_two_shards(overlay):
    table, creators, creds, members = make_groups(seed=5)
    out = []
    for k in (1, 2):
        w = build(overlay, k, table, creators, creds, members)
        w.inject(multicast_requests(rp_of(w), np.arange(G), 10_000_000, creds))
        w.run()
        w.dump()
        te = w.table("tree_edge")
        d = w.table("delivery")
        o = np.lexsort((te["child"], te["group"]))
        od = np.lexsort((d["member"], d["group"]))
        out.append((te["group"][o], te["parent"][o], te["child"][o],
                    d["group"][od], d["member"][od], d["time"][od], d["hops"][od]))
    for a, b in zip(*out):
        assert np.array_equal(a, b)


def test_second_multicast_uses_cached_rp(overlay):
    table, creators, creds, members = make_groups(seed=9)
    w = build(overlay, 2, table, creators, creds, members)
    src = np.array([(rp_of(w)[0] + 1) % N, (rp_of(w)[0] + 1) % N])
    w.inject(multicast_requests(src, [0, 0], [10_000_000, 20_000_000], creds[0], seqno=[1, 2]))
    w.run()
    d = w.table("delivery")
    for s in (1, 2):
        assert np.array_equal(np.sort(d["member"][d["seqno"] == s]), members[0])
    rp = rp_of(w)[0]
    # the second copy travels source -> RP directly: one hop before the tree
    first = d["hops"][(d["seqno"] == 1) & (d["member"] == rp)] if rp in members[0] else None
    hops2 = d["hops"][d["seqno"] == 2]
    hops1 = d["hops"][d["seqno"] == 1]
    assert hops2.sum() <= hops1.sum()
    del first


def test_acl_refuses_bad_joins_and_multicasts(overlay):
    table, creators, creds, members = make_groups(seed=11)
    w = build(overlay, 2, table, creators, creds, members)
    rp = rp_of(w)
    outsiders = np.setdiff1d(np.arange(N), members[3])[:5]
    w.inject(join_requests(outsiders, 3, 5_000_000, creds[3] + 1))  # wrong credential
    w.run()
    w.inject(multicast_requests([rp[3], rp[3]], [3, 3], [9_000_000, 9_000_001],
                                [creds[3], creds[3] + 7], seqno=[1, 2]))
    w.run()
    d = w.table("delivery")
    assert np.array_equal(np.sort(d["member"][d["group"] == 3]), members[3])
    assert not np.isin(outsiders, d["member"][d["group"] == 3]).any()
    ref = w.table("refused")
    assert (ref["op"] == "join").sum() >= 1
    assert (ref["op"] == "multicast").sum() == 1
    assert not (d["seqno"] == 2).any()
    # the refused joiners left no branch behind
    w.logs.pop("tree_edge", None)
    w.dump()
    assert edges_of(w, 3) == reference_tree(overlay, table, 3, members[3])


def test_leave_prunes_exactly_the_branches_without_members(overlay):
    table, creators, creds, members = make_groups(seed=13)
    w = build(overlay, 2, table, creators, creds, members)
    rng = np.random.default_rng(0)
    leavers = [rng.choice(m, size=len(m) // 2, replace=False) for m in members]
    lv = np.concatenate(leavers)
    lg = np.concatenate([np.full(len(x), g) for g, x in enumerate(leavers)])
    w.inject(leave_requests(lv, lg, 5_000_000 + (np.arange(len(lv)) * 131) % 20_000, creds[lg]))
    w.run()
    w.dump()
    for g in range(G):
        stay = np.setdiff1d(members[g], leavers[g])
        assert edges_of(w, g) == reference_tree(overlay, table, g, stay)
    w.inject(multicast_requests(rp_of(w), np.arange(G), 10_000_000, creds))
    w.run()
    d = w.table("delivery")
    for g in range(G):
        assert np.array_equal(np.sort(d["member"][d["group"] == g]),
                              np.setdiff1d(members[g], leavers[g]))


def test_checkpoint_restore_continues_identically(overlay):
    import pickle

    table, creators, creds, members = make_groups(seed=17)
    w = build(overlay, 2, table, creators, creds, members)
    for k, stack in enumerate(w.stacks):
        state = pickle.loads(pickle.dumps(stack.app.checkpoint()))
        fresh = Scribe({})
        stack.app = fresh
        fresh.bind(stack)
        fresh.setup(w.ctxs[k])
        fresh.restore(state)
    w.inject(multicast_requests(rp_of(w), np.arange(G), 10_000_000, creds))
    w.run()
    d = w.table("delivery")
    for g in range(G):
        assert np.array_equal(np.sort(d["member"][d["group"] == g]), members[g])


def test_bad_input_is_refused_with_clear_errors():
    with pytest.raises(ValueError, match="bottleneck_bound"):
        Scribe({"bottleneck": True, "bottleneck_bound": 0})
    with pytest.raises(ValueError, match="unknown parameter"):
        Scribe({"bogus": 1})
    with pytest.raises(ValueError, match="same length"):
        group_table(["a", "b"], ["x"], [1, 2])
    with pytest.raises(ValueError, match="unique"):
        group_table(["a", "a"], ["x", "y"], [1, 2])
    with pytest.raises(ValueError, match="times"):
        join_requests([1, 2], [0, 0], [5, 6, 7], 1)
    with pytest.raises(ValueError, match=">= 0"):
        multicast_requests([-1], [0], [5], 1)


def test_group_ids_are_sha1_of_name_and_creator():
    import hashlib

    t = group_table(["news"], ["alice"], [3])
    digest = hashlib.sha1(b"newsalice").digest()
    assert int(t["id_hi"][0]) == int.from_bytes(digest[:8], "big")
    assert int(t["id_lo"][0]) == int.from_bytes(digest[8:16], "big")
    assert t["id_hex"][0] == digest[:16].hex()
