"""Lazy-growth variant on the real stack (LocalEmulator): a JOIN stops at the first tree
node, which adopts the joiner."""

import numpy as np
import pytest

from actors.scribe import multicast_requests
from test_scribe_tree import G, N, assert_members_reach_root, build, make_groups

BOUND = 8


@pytest.fixture(scope="module")
def lazy_run():
    table, creators, creds, members = make_groups(seed=12)
    w = build(51, 2, table, creators, creds, members,
              scribe={"lazy_growth": True, "bottleneck_bound": BOUND})
    w.dump()
    return w, table, creds, members


def test_lazy_growth_trees_hold_only_members_and_deliver_once(lazy_run):
    w, table, creds, members = lazy_run
    rp = w.rendezvous(G)
    te = w.table("tree_edge")
    for g in range(G):
        sel = te["group"] == g
        nodes = set(te["parent"][sel].tolist()) | set(te["child"][sel].tolist())
        assert nodes <= set(members[g].tolist()) | {int(rp[g])}  # no non-member forwarders
        assert_members_reach_root(w.tree_edges(g), members[g], rp[g])
        plain = w.route_tree(members[g], table["id_hi"][g], table["id_lo"][g])
        assert sel.sum() <= len(plain)
    w.inject(multicast_requests(rp, np.arange(G), 10_000_000, creds))
    w.run()
    d = w.table("delivery")
    for g in range(G):
        assert np.array_equal(np.sort(d["member"][d["group"] == g]), members[g])


def test_lazy_growth_bound_caps_children_except_at_the_rp(lazy_run):
    w, *_ = lazy_run
    rp = w.rendezvous(G)
    te = w.table("tree_edge")
    per_parent = np.bincount(te["parent"], minlength=N)
    assert (np.delete(per_parent, rp) <= BOUND).all()   # the RP always adopts
