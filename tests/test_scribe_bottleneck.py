"""Bottleneck remover: children per node bounded, members stay connected, probes logged."""

import numpy as np
from scribe_harness import Overlay, World
from test_scribe_tree import G, N, make_groups

from actors.scribe import Scribe, create_requests, join_requests, multicast_requests

BOUND = 6


def run(shards, bound=BOUND):
    overlay = Overlay(N, seed=31)
    table, creators, creds, members = make_groups(seed=2)
    w = World(overlay, lambda: Scribe({"bottleneck": True, "bottleneck_bound": bound}),
              shards=shards, shared={"groups": table})
    w.inject(create_requests(creators, np.arange(G), 0, creds))
    w.run()
    mem = np.concatenate(members)
    grp = np.concatenate([np.full(len(m), g) for g, m in enumerate(members)])
    w.inject(join_requests(mem, grp, 100_000 + (np.arange(len(mem)) * 997) % 50_000, creds[grp]))
    w.run()
    gt = w.table("group")
    rp = np.full(G, -1)
    rp[gt["group"]] = gt["rp"]
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
        sel = te["group"] == g
        parent = dict(zip(te["child"][sel].tolist(), te["parent"][sel].tolist()))
        assert len(parent) == sel.sum()
        for m in members[g]:
            node, seen = int(m), set()
            while node != rp[g]:
                assert node not in seen, "loop"
                seen.add(node)
                node = parent[node]
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
    for k in (1, 2):
        w, _, _ = run(k)
        te = w.table("tree_edge")
        p = w.table("probe")
        o = np.lexsort((te["child"], te["group"]))
        op = np.lexsort((p["target"], p["time"], p["node"]))
        outs.append((te["parent"][o], te["child"][o], p["node"][op], p["target"][op]))
    for a, b in zip(*outs):
        assert np.array_equal(a, b)
