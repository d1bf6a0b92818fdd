"""Tree repair: heartbeats, parent suspicion, re-join, RP replication and take-over."""

import numpy as np
import pytest
from scribe_harness import Overlay, World
from test_scribe_tree import G, N, make_groups

from actors.scribe import Scribe, create_requests, join_requests, multicast_requests

HB = 50_000  # 50 ms maintenance period


def start(shards, seed=41, params=None):
    overlay = Overlay(N, seed=seed)
    table, creators, creds, members = make_groups(seed=6)
    p = {"heartbeat_us": HB, **(params or {})}
    w = World(overlay, lambda: Scribe(p), shards=shards, shared={"groups": table})
    w.inject(create_requests(creators, np.arange(G), 0, creds))
    mem = np.concatenate(members)
    grp = np.concatenate([np.full(len(m), g) for g, m in enumerate(members)])
    w.inject(join_requests(mem, grp, 100_000 + (np.arange(len(mem)) * 997) % 50_000, creds[grp]))
    w.run(until=1_000_000)
    gt = w.table("group")
    rp = np.full(G, -1)
    rp[gt["group"]] = gt["rp"]
    return overlay, w, table, creds, members, rp


def forwarders(w, members):
    te_before = {}
    w.dump()
    te = w.table("tree_edge")
    w.logs.pop("tree_edge")
    all_members = set(np.concatenate(members).tolist())
    parents = set(te["parent"].tolist())
    del te_before
    return sorted(parents - all_members)


@pytest.mark.parametrize("shards", [1, 2])
def test_repair_after_forwarder_and_root_failures(shards):
    overlay, w, table, creds, members, rp = start(shards)
    # stable: heartbeats flow, nothing repaired, members get a multicast
    w.inject(multicast_requests(rp, np.arange(G), 1_100_000, creds, seqno=1))
    w.run(until=2_000_000)
    assert w.counters.get("scribe_repairs", 0) == 0
    assert w.counters.get("scribe_children_expired", 0) == 0
    fwd = [f for f in forwarders(w, members) if f not in set(rp.tolist())][:8]
    dead = np.array(fwd + [int(rp[0])])
    w.fail(dead)
    # a member (not the RP) multicasts: its route finds the new RP after the take-over
    src = np.array([m[m != rp[g]][0] for g, m in enumerate(members)])
    src = np.where(np.isin(src, dead), np.array([m[-1] for m in members]), src)
    w.inject(multicast_requests(src, np.arange(G), 3_000_000, creds, seqno=2))
    w.run(until=4_000_000)
    assert w.counters["scribe_repairs"] > 0
    assert w.counters["scribe_rp_takeovers"] >= 1
    d = w.table("delivery")
    for g in range(G):
        alive = np.setdiff1d(members[g], dead)
        got = np.sort(d["member"][(d["group"] == g) & (d["seqno"] == 2)])
        assert np.array_equal(got, alive), f"group {g}"
    # the new root of group 0 is the live node closest to its id
    w.dump()
    te = w.table("tree_edge")
    sel = te["group"] == 0
    roots = set(te["parent"][sel].tolist()) - set(te["child"][sel].tolist())
    assert roots == {int(overlay.root(table["id_hi"][0:1])[0])}
    assert not np.isin(te["parent"], dead).any()


def test_children_expire_without_refresh():
    _overlay, w, _table, _creds, members, rp = start(1)
    # a member crashes silently: its parent drops it after child_expiry_miss periods
    victim = int(members[0][0] if members[0][0] != rp[0] else members[0][1])
    w.dump()
    te = w.table("tree_edge")
    w.logs.pop("tree_edge")
    assert victim in te["child"][te["group"] == 0]
    w.fail([victim])
    w.run(until=2_000_000)
    assert w.counters["scribe_children_expired"] >= 1
    w.dump()
    te = w.table("tree_edge")
    assert victim not in te["child"]


def test_new_leafs_refreshes_replicas_on_the_next_tick():
    overlay, w, _table, creds, members, rp = start(1)
    app, ctx = w.stacks[0].app, w.ctxs[0]
    g = 0
    # the RP's replicas are lost (say the replica holders were replaced)
    sl = app.tree.slots
    holders = overlay.replica_set([rp[g]], 5)[0]
    hs = app.tree.find(ctx.local(holders), np.full(5, g))
    sl["rep_acl"][hs] = -1
    app.new_leafs(ctx, ctx.local([rp[g]]))
    w.run(until=1_200_000)  # one tick later the RP has re-sent its record
    assert (sl["rep_acl"][hs] == creds[g]).all()
    # and the replicas are what lets a new RP take over
    w.fail([rp[g]])
    src = members[g][members[g] != rp[g]][0]
    w.inject(multicast_requests([src], [g], 2_000_000, creds[g], seqno=5))
    w.run(until=3_000_000)
    d = w.table("delivery")
    got = np.sort(d["member"][(d["group"] == g) & (d["seqno"] == 5)])
    assert np.array_equal(got, np.setdiff1d(members[g], [rp[g]]))
    assert w.counters["scribe_rp_takeovers"] == 1
