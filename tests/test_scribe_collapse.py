"""Tree collapse on the real stack (LocalEmulator): exactly the non-member forwarders with
one child disappear from trees built on real Pastry routes, chains included."""

import numpy as np

from actors.scribe import collapse_requests, multicast_requests
from test_scribe_tree import G, N, build, make_groups


def collapse_reference(edges, members, root):
    """Expected collapsed tree: splice out every non-member, non-root node with one child."""
    children = {}
    for p, c in edges:
        children.setdefault(p, []).append(c)
    members = {int(m) for m in members}
    out = set()

    def walk(node, kept_parent):
        kids = children.get(node, [])
        removable = node not in members and node != root and len(kids) == 1
        if not removable and kept_parent is not None:
            out.add((kept_parent, node))
        for k in kids:
            walk(k, kept_parent if removable else node)

    walk(root, None)
    return out


def test_collapse_matches_reference_and_keeps_delivery():
    table, creators, creds, members = make_groups(seed=4)
    w = build(21, 2, table, creators, creds, members)
    rp = w.rendezvous(G)
    w.inject(collapse_requests(np.arange(N), 3_000_000))
    w.run()
    w.dump()
    removed_total = 0
    for g in range(G):
        before = w.route_tree(members[g], table["id_hi"][g], table["id_lo"][g])
        expect = collapse_reference(before, members[g], int(rp[g]))
        got = w.tree_edges(g)
        assert got == expect
        fwd_before = {p for p, _ in before} - set(members[g].tolist())
        fwd_after = {p for p, _ in got} - set(members[g].tolist())
        removed_total += len(fwd_before) - len(fwd_after)
        # every member still has exactly one way up to the root
        nodes = {c for _, c in got}
        assert set(members[g].tolist()) - {int(rp[g])} <= nodes
    assert removed_total > 0
    assert w.counters["scribe_collapsed_nodes"] == removed_total
    w.inject(multicast_requests(rp, np.arange(G), 10_000_000, creds))
    w.run()
    d = w.table("delivery")
    assert set(d["variant"].tolist()) == {"collapsed"}
    for g in range(G):
        assert np.array_equal(np.sort(d["member"][d["group"] == g]), members[g])


def test_collapse_handles_long_chains():
    # a group of two far-apart members creates chains of single-child forwarders
    table, creators, creds, members = make_groups(seed=8)
    members = [m[:2] for m in members]
    w = build(22, 1, table, creators, creds, members)
    rp = w.rendezvous(G)
    w.inject(collapse_requests(rp, 3_000_000))  # requests at the roots suffice
    w.run()
    w.dump()
    for g in range(G):
        before = w.route_tree(members[g], table["id_hi"][g], table["id_lo"][g])
        got = w.tree_edges(g)
        assert got == collapse_reference(before, members[g], int(rp[g]))
        assert set(members[g].tolist()) - {int(rp[g])} <= {c for _, c in got}
        fanout = {}
        for p, _ in got:
            fanout[p] = fanout.get(p, 0) + 1
        # what is left besides members and the root are branch points
        for node in {c for _, c in got} - set(members[g].tolist()):
            assert fanout.get(node, 0) >= 2


def test_collapse_in_the_compiled_loop_matches_the_python_loop(monkeypatch):
    """The collapse's kernels through the stack's compiled loop (``on_runs``: COLLAPSE_WAVE
    and ADOPT runs, the tree's entry index grown by ADOPTs) and through the handlers'
    path (``TreeCollapse`` calling them one cell at a time) give the same run: logs,
    counters, sends and trees, on two shards (waves and adoptions cross them)."""
    from actors.scribe.types import ADOPT, COLLAPSE_WAVE
    from protocol_world import run_without_loop, same_outcome

    table, creators, creds, members = make_groups(seed=6)

    def run():
        w = build(23, 2, table, creators, creds, members)
        before = sum(e.python_events for e in w.emu.engines)
        w.inject(collapse_requests(np.arange(N), 3_000_000))
        w.run()
        python = sum(e.python_events for e in w.emu.engines) - before
        w.dump()
        logs = {name: w.table(name) for name in ("tree_edge", "route")}
        trees = [e.stack.app.tree.state() for e in w.emu.engines]
        return logs, w.counters, w.sent, trees, python

    looped = run()
    waves, adopts = looped[2].get(COLLAPSE_WAVE, 0), looped[2].get(ADOPT, 0)
    assert waves > 50 and adopts > 5, looped[2]
    assert looped[1]["scribe_collapsed_nodes"] > 0
    fast = run_without_loop(monkeypatch, run)
    # without the loop Python saw every message of the collapse (and the requests); with
    # it the loop took most waves and adoptions (the sparsest cells go to Python anyway,
    # and after a pass handed back -- the requests' -- the next few cells: how many
    # depends on the loop's pacing before, ShardEngine._pace_loop)
    assert fast[4] >= waves + adopts
    assert fast[4] - looped[4] > 0.7 * (waves + adopts)
    same_outcome(looped, fast)
