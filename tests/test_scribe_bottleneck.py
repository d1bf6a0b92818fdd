"""Bottleneck remover on the real stack (LocalEmulator): children per node bounded,
members stay connected, probes logged, same results on 1, 2 and 3 shards; root paths
break a loop the remover could close."""

import numpy as np

from actors.scribe import multicast_requests
from protocol_world import protocol_message, root_of
from test_scribe_tree import G, N, assert_members_reach_root, build, make_groups

BOUND = 6


def run(shards, bound=BOUND):
    table, creators, creds, members = make_groups(seed=2)
    w = build(31, shards, table, creators, creds, members,
              scribe={"bottleneck": True, "bottleneck_bound": bound})
    rp = w.rendezvous(G)
    w.inject(multicast_requests(rp, np.arange(G), 10_000_000, creds))
    w.run()
    w.dump()
    return w, members, rp


def test_bound_holds_and_every_member_stays_connected():
    w, members, rp = run(2)
    te = w.table("tree_edge")
    assert set(te["variant"].tolist()) == {"bottleneck"}
    total = np.bincount(te["parent"], minlength=N)
    over = np.flatnonzero(total > BOUND)
    for node in over:  # only nodes whose tables all hold one child may stay above
        per_group = np.bincount(te["group"][te["parent"] == node])
        assert per_group.max() <= 1
    assert len(over) <= 2
    for g in range(G):
        assert_members_reach_root(w.tree_edges(g), members[g], rp[g])
    d = w.table("delivery")
    for g in range(G):
        assert np.array_equal(np.sort(d["member"][d["group"] == g]), members[g])
    probes = w.table("probe")
    assert w.counters["scribe_bottleneck_drops"] > 0
    assert len(probes["node"]) == w.counters["scribe_probes"] > 0


def test_without_remover_bound_is_exceeded():
    w, _members, _rp = run(1, bound=10**6)
    te = w.table("tree_edge")
    assert np.bincount(te["parent"], minlength=N).max() > BOUND


def test_bottleneck_identical_across_shards():
    outs = []
    for k in (1, 2, 3):
        w, _, _ = run(k)
        te = w.table("tree_edge")
        p = w.table("probe")
        o = np.lexsort((te["child"], te["group"]))
        op = np.lexsort((p["target"], p["time"], p["node"]))
        outs.append((te["parent"][o], te["child"][o], p["node"][op], p["target"][op]))
    for other in outs[1:]:
        for a, b in zip(outs[0], other, strict=True):
            assert np.array_equal(a, b)


def _looped_run(root_paths: bool):
    """Build trees with the remover and repair on, then make node X ask its own grandchild
    D to adopt it (the move a stale sibling list can cause under churn), multicast later.
    Returns (world, members, group table, credentials, group, X, D)."""
    from actors.scribe.types import BN_JOIN, BnJoin
    hb = 200_000
    table, creators, creds, members = make_groups(seed=2)
    w = build(31, 2, table, creators, creds, members, until=2_000_000,
              scribe={"bottleneck": True, "bottleneck_bound": BOUND, "heartbeat_us": hb,
                      "root_paths": root_paths})
    te = w.fresh_tree_edges()
    # a chain X -> C -> D in group 0 with X not the root
    g = 0
    sel = te["group"] == g
    parent = dict(zip(te["child"][sel].tolist(), te["parent"][sel].tolist(), strict=True))
    x = d = None
    for node, par in sorted(parent.items()):
        grand = parent.get(par)
        if grand is not None and grand in parent:
            x, d = grand, node
            break
    assert x is not None, "no chain of depth 3 below the root"
    w.inject(protocol_message(x, d, BN_JOIN, 2_100_000, group=g,
                              **BnJoin.fields(credential=creds[g], last_seq=-1, repair=1)))
    w.run(until=4_000_000)
    return w, members, table, creds, g, x, d


def test_root_paths_break_a_loop_the_remover_could_close():
    """With root paths the looping move is detected and both nodes re-join at random:
    the tree is loop-free again and a later multicast reaches every member once. Without
    them the loop sustains itself (its nodes heartbeat each other) and cuts members off."""
    outcomes = {}
    for paths in (True, False):
        w, members, table, creds, g, x, d = _looped_run(paths)
        rp = int(root_of(w.net, table["id_hi"][g], table["id_lo"][g])[0])
        w.inject(multicast_requests(np.array([rp]), np.array([g]), 4_100_000, creds[g:g + 1]))
        w.run(until=6_000_000)
        te = w.fresh_tree_edges()
        sel = te["group"] == g
        children = te["child"][sel]
        assert len(np.unique(children)) == len(children), "a node with two parents"
        parent = dict(zip(children.tolist(), te["parent"][sel].tolist(), strict=True))
        reached = 0
        for m in members[g]:
            node, seen = int(m), set()
            while node != rp and node in parent and node not in seen:
                seen.add(node)
                node = parent[node]
            reached += node == rp
        dl = w.table("delivery")
        got = dl["member"][(dl["group"] == g) & (dl["publish_time"] == 4_100_000)]
        outcomes[paths] = (reached, np.sort(got), w.counters)
    reached, got, counters = outcomes[True]
    assert counters.get("scribe_loops_join", 0) + counters.get("scribe_loops_path", 0) >= 1
    assert reached == len(members[g])
    assert np.array_equal(got, members[g])
    reached_off, got_off, counters_off = outcomes[False]
    assert "scribe_loops_join" not in counters_off and "scribe_loops_path" not in counters_off
    assert reached_off < len(members[g]) and len(got_off) < len(members[g])
