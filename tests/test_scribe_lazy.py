"""Lazy-growth variant: a JOIN stops at the first tree node, which adopts the joiner."""

import numpy as np
from scribe_harness import Overlay, World
from test_scribe_tree import G, N, make_groups, reference_tree

from actors.scribe import Scribe, create_requests, join_requests, multicast_requests


def test_lazy_growth_trees_hold_only_members_and_deliver_once():
    overlay = Overlay(N, seed=51)
    table, creators, creds, members = make_groups(seed=12)
    w = World(overlay, lambda: Scribe({"lazy_growth": True, "bottleneck_bound": 8}),
              shards=2, shared={"groups": table})
    w.inject(create_requests(creators, np.arange(G), 0, creds))
    w.run()
    mem = np.concatenate(members)
    grp = np.concatenate([np.full(len(m), g) for g, m in enumerate(members)])
    w.inject(join_requests(mem, grp, 100_000 + (np.arange(len(mem)) * 997) % 50_000, creds[grp]))
    w.run()
    gt = w.table("group")
    rp = np.full(G, -1)
    rp[gt["group"]] = gt["rp"]
    w.dump()
    te = w.table("tree_edge")
    for g in range(G):
        sel = te["group"] == g
        nodes = set(te["parent"][sel].tolist()) | set(te["child"][sel].tolist())
        assert nodes <= set(members[g].tolist()) | {int(rp[g])}  # no non-member forwarders
        parent = dict(zip(te["child"][sel].tolist(), te["parent"][sel].tolist()))
        for m in members[g]:
            node, seen = int(m), set()
            while node != rp[g]:
                assert node not in seen
                seen.add(node)
                node = parent[node]
        plain = reference_tree(overlay, table, g, members[g])
        assert sel.sum() <= len(plain)
    # the bound caps children where nodes had room (the RP always adopts)
    per_parent = np.bincount(te["parent"], minlength=N)
    assert (np.delete(per_parent, rp) <= 8).all()
    w.inject(multicast_requests(rp, np.arange(G), 10_000_000, creds))
    w.run()
    d = w.table("delivery")
    for g in range(G):
        assert np.array_equal(np.sort(d["member"][d["group"] == g]), members[g])
