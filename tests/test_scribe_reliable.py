"""Ordered reliable delivery on the real stack (LocalEmulator): with the layer every
surviving member gets every message of a stream exactly once and in order despite
forwarder failures; without it some are lost. Same deliveries on 1 and 3 shards."""

import numpy as np

from actors.scribe import multicast_requests
from test_scribe_repair import READY, forwarders, start

T0, T_END, EVERY = READY + 100_000, READY + 2_000_000, 20_000
FAIL_AT = READY + 1_000_000


def stream(reliable, shards=1):
    w, _table, creds, members, rp = start(
        shards, seed=43, params={"reliable": True} if reliable else {})
    times = np.arange(T0, T_END, EVERY)
    n = len(times)
    g = np.tile(np.arange(len(members)), n)
    w.inject(multicast_requests(rp[g], g, np.repeat(times, len(members)), creds[g],
                                seqno=np.repeat(np.arange(n), len(members))))
    w.run(until=FAIL_AT)
    fwd = [f for f in forwarders(w, members) if f not in set(rp.tolist())][:10]
    w.fail(np.array(fwd))
    w.run(until=T_END + 1_000_000)
    return w, members, np.array(fwd), n


def test_reliable_layer_delivers_everything_in_order():
    w, members, dead, n = stream(True)
    assert w.counters["scribe_repairs"] > 0
    assert w.counters["scribe_retransmissions"] > 0
    d = w.table("delivery")
    for g, mem in enumerate(members):
        for m in np.setdiff1d(mem, dead):
            sel = (d["group"] == g) & (d["member"] == m)
            seq = d["seqno"][sel]
            assert np.array_equal(seq, np.arange(n)), (g, m)   # all, once, in log order
            assert (np.diff(d["time"][sel]) >= 0).all()        # delivered in seqno order


def test_without_the_layer_messages_are_lost():
    w, members, dead, n = stream(False)
    d = w.table("delivery")
    expected = sum(len(np.setdiff1d(m, dead)) for m in members) * n
    got = int((~np.isin(d["member"], dead)).sum())
    assert w.counters["scribe_repairs"] > 0
    assert got < expected


def test_reliable_identical_across_shards():
    out = []
    for k in (1, 3):
        w, _, _, _ = stream(True, shards=k)
        d = w.table("delivery")
        o = np.lexsort((d["seqno"], d["member"], d["group"]))
        out.append((d["group"][o], d["member"][o], d["seqno"][o], d["time"][o]))
    for a, b in zip(*out, strict=True):
        assert np.array_equal(a, b)


def test_a_forgotten_slot_forgets_its_buffered_messages():
    """A slot the tree resets (it left the tree) keeps no buffered message: a stale buffer
    would make a re-joined forwarder drop the copies re-sent for its children as
    duplicates, and hold its members back for good."""
    from actors.scribe.reliable import OrderedDelivery
    from actors.scribe.tree import TreeState

    tree = TreeState(n_local=4, n_nodes=4, n_groups=2)
    s = tree.get_or_make(np.array([0, 1]), np.array([0, 0]))
    ordered = OrderedDelivery(tree, None, 8, lambda: "scribe")
    seq = np.arange(5)
    for slot in s.tolist():
        ordered.ring.put(np.full(5, slot), seq, seq * 10, np.zeros(5), np.ones(5))
    tree.reset(s[:1])
    assert (ordered.ring.get(np.full(5, s[0]), seq) == -1).all()
    assert (ordered.ring.get(np.full(5, s[1]), seq) >= 0).all()
    assert tree.slots["top_seq"][s[0]] == -1
