"""Reliable layer, gaps that the ordinary repair does not close: repairs that must fill a
gap the new parent cannot see from its own position, and messages that must reach an RP
Pastry no longer routes to (real stack, LocalEmulator):

- forwarders fail before the stream's first message reaches them: the members below
  never had a message when they re-join, and get every message from seqno 0 (the new
  parent's JOIN_ACK, which arrives with the re-sent messages, must not move them to the
  parent's position);
- a node that joined the tree late (a forwarder made for one repairing child) adopts a
  second repairing child that is further behind: it fetches the messages it never had,
  and the child gets them;
- the RP fails, a replica takes over and the failed node recovers without state as the
  node closest to the key: the source's re-sends must go to the RP that answers it, not
  be routed into the recovered node, which refuses them."""

import numpy as np

from test_scribe_reliable_failover import T_END, publish
from test_scribe_repair import READY, forwarders, start


def assert_every_message_once_in_order(w, members, dead, n):
    d = w.table("delivery")
    for g, mem in enumerate(members):
        for m in np.setdiff1d(mem, dead):
            sel = (d["group"] == g) & (d["member"] == m)
            assert np.array_equal(d["seqno"][sel], np.arange(n)), (g, m)


def test_members_cut_off_before_the_first_message_get_the_whole_stream():
    w, _table, creds, members, rp = start(1, seed=43, params={"reliable": True})
    n = publish(w, creds, members, rp)
    dead = np.array([f for f in forwarders(w, members) if f not in set(rp.tolist())][:10])
    w.fail(dead)          # before T0: nobody below them has a message yet
    w.run(until=T_END + 1_000_000)
    assert w.counters["scribe_repairs"] > 0
    assert_every_message_once_in_order(w, members, dead, n)


def test_a_late_forwarder_fetches_what_a_repairing_child_further_behind_needs():
    """Off-tree node F gets a repair JOIN from member A (up to date) and becomes a
    forwarder at A's position; then one from member B, whose parent failed 10 messages
    earlier. F never had B's missing messages: it must fetch them for B."""
    from actors.scribe.types import JOIN, Join
    from protocol_world import protocol_message

    w, table, creds, members, rp = start(1, seed=43, params={"reliable": True})
    n = publish(w, creds, members, rp)
    w.run(until=READY + 500_000)
    te = w.fresh_tree_edges()
    g = 0
    sel = te["group"] == g
    parent = dict(zip(te["child"][sel].tolist(), te["parent"][sel].tolist(), strict=True))
    children = {}
    for c, p in parent.items():
        children.setdefault(p, []).append(c)

    def subtree(x):
        out, todo = set(), [x]
        while todo:
            y = todo.pop()
            out.add(y)
            todo += children.get(y, [])
        return out

    mem = [int(m) for m in members[g] if m != rp[g]]
    b = next(m for m in mem if parent.get(m, rp[g]) != rp[g])
    pb = parent[b]
    cut = subtree(pb)
    a = next(m for m in mem if m not in cut)
    on_tree = set(parent) | set(parent.values())
    kh, kl = table["id_hi"][g], table["id_lo"][g]
    f = None
    for x in range(w.n):
        if x in on_tree or x == rp[g]:
            continue
        hop = int(w.routes([x], kh, kl)[0][1])
        if hop in on_tree and hop not in cut and hop != a:
            f = x
            break
    assert f is not None
    w.fail([pb])
    w.run(until=READY + 700_000)
    d = w.table("delivery")
    pos = {m: int(d["seqno"][(d["group"] == g) & (d["member"] == m)].max()) for m in (a, b)}
    assert pos[b] < pos[a] - 1
    at = READY + 700_000
    for i, m in enumerate((a, b)):    # A's repair JOIN, then B's, both routed via F
        w.inject(protocol_message(m, f, JOIN, at + 5_000 * i, group=g, mode=1, origin=m,
                                  key_hi=kh, key_lo=kl,
                                  **Join.fields(credential=creds[g], last_seq=pos[m],
                                                repair=1)))
    w.run(until=T_END + 1_000_000)
    assert_every_message_once_in_order(w, members, np.array([pb]), n)
    assert w.counters["scribe_gap_fetches"] >= 1


def test_re_sends_reach_the_new_rp_after_the_failed_one_recovers_as_the_keys_root():
    """A member streams to its group; the RP fails, a replica takes over, and the failed
    node recovers without Scribe state: it is again the live node closest to the group's
    key, so every routed message of the group ends there and is refused (it is not the
    RP). The source's messages lost with the failed RP are re-sent to the RP that
    acknowledges them (RP_ADDR), not routed into the recovered node: every surviving
    member gets the whole stream, once and in order."""
    w, table, creds, members, rp = start(1, seed=43, params={"reliable": True})
    g, old = 0, int(rp[0])
    src = np.array([m[~np.isin(m, rp)][0] for m in members])
    n = publish(w, creds, members, src)
    fail_at = READY + 1_000_000
    w.run(until=fail_at)
    w.fail([old])
    w.run(until=fail_at + 800_000)     # the take-over has happened
    w.recover([old])
    w.run(until=T_END + 3_000_000)
    assert w.counters["scribe_rp_takeovers"] == 1
    te = w.fresh_tree_edges()
    sel = te["group"] == g
    roots = set(te["parent"][sel].tolist()) - set(te["child"][sel].tolist())
    assert len(roots) == 1 and old not in roots             # the replica is the RP ...
    route = w.routes([src[g]], table["id_hi"][g], table["id_lo"][g])[0]
    assert route[route >= 0][-1] == old                     # ... but routes end at `old`
    assert_every_message_once_in_order(w, members, np.array([old]), n)
    assert w.counters.get("scribe_refused_multicast", 0) == 0
