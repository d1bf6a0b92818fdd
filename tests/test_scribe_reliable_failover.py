"""Reliable layer through RP fail-overs, on the real stack (LocalEmulator, 1 and
3 shards): a member (not the RP) streams to every group; mid-stream the RP of two groups
and some forwarders fail for good. Every surviving member gets every message exactly once,
in publish order; messages the sources sent to a dead RP are re-sent and numbered by the
replica that took over, which goes on with the failed RP's numbering."""

import numpy as np
import pytest

from actors.scribe import multicast_requests
from test_scribe_repair import READY, forwarders, start

T0, T_END, EVERY = READY + 100_000, READY + 2_000_000, 20_000
FAIL_AT = READY + 1_000_000


def publish(w, creds, members, sources) -> int:
    """Every group's stream: one multicast per group every EVERY from T0 to T_END, from
    ``sources[group]``, seqnos 0, 1, ...; returns how many per group."""
    times = np.arange(T0, T_END, EVERY)
    n, G = len(times), len(members)
    g = np.tile(np.arange(G), n)
    w.inject(multicast_requests(sources[g], g, np.repeat(times, G), creds[g],
                                seqno=np.repeat(np.arange(n), G)))
    return n


def stream(shards, reliable=True):
    w, _table, creds, members, rp = start(
        shards, seed=43, params={"reliable": True} if reliable else {})
    rps = set(rp.tolist())
    src = np.array([m[~np.isin(m, rp)][0] for m in members])
    publish(w, creds, members, src)
    times = np.arange(T0, T_END, EVERY)
    w.run(until=FAIL_AT)
    fwd = [f for f in forwarders(w, members) if f not in rps and f not in set(src.tolist())]
    dead = np.array(fwd[:6] + [int(rp[0]), int(rp[1])])
    w.fail(dead)
    w.run(until=T_END + 1_500_000)
    return w, members, src, dead, times


@pytest.mark.parametrize("shards", [1, 3])
def test_every_surviving_member_gets_every_message_once_in_publish_order(shards):
    w, members, src, dead, times = stream(shards)
    assert w.counters["scribe_rp_takeovers"] >= 2
    assert w.counters["scribe_publish_retries"] > 0      # sent to a dead RP, sent again
    d = w.table("delivery")
    for g, mem in enumerate(members):
        for m in np.setdiff1d(mem, np.r_[dead, src[g]]):
            sel = (d["group"] == g) & (d["member"] == m)
            o = np.lexsort((d["seqno"][sel], d["time"][sel]))      # release order
            assert np.array_equal(d["seqno"][sel][o], np.arange(len(times))), (g, m)
            assert np.array_equal(d["publish_time"][sel][o], times), (g, m)
    # the raw tree stream is logged apart; copies beyond the released ones are duplicates
    a = w.table("arrival")
    assert len(a["member"]) >= len(d["member"])


def test_without_the_layer_the_failed_rps_groups_lose_messages():
    w, members, src, dead, times = stream(1, reliable=False)
    d = w.table("delivery")
    for g in (0, 1):
        m = np.setdiff1d(members[g], np.r_[dead, src[g]])
        got = np.isin(d["member"], m) & (d["group"] == g)
        assert got.sum() < len(m) * len(times)
