"""Scale-out: per-shard window bounds are safe, the lookahead matrix is exact, the partition
for many shards balances hosts and keeps domains whole.

The real Pastry + Scribe stack on 1, 2, 3 and 8 shards (same event logs row for row; at 1
and 2 also the same CSVs and figures) is in tests/test_shard_invariance.py, on a 3-node Ray
cluster in tests/test_cluster_event_logs.py."""

from __future__ import annotations

import numpy as np
import pytest

from emulator import heads
from emulator.driver import earliest_causes, reach_matrix, window_ends
from emulator.heads import bound_left
from emulator.queue import NEVER
from scenarios import runner as runner_mod


# ---- pure parts -------------------------------------------------------------------------
def test_window_ends_respect_every_chain_of_messages():
    rng = np.random.default_rng(3)
    k, d = 6, 2_000
    look = rng.integers(d, 40 * d, (k, k)).astype(np.int64)
    np.fill_diagonal(look, NEVER)
    nxt = rng.integers(0, 100 * d, k).astype(np.int64)
    nxt[2] = NEVER                                   # an idle shard bounds nobody by itself
    reach = reach_matrix(look)
    ends = window_ends(nxt, reach, d, 10 ** 9, NEVER)
    # the earliest event each shard can have: its own, or one sent to it along any chain
    # (a fixed point of one-hop relaxations, found here independently of reach_matrix)
    at = nxt.copy()
    for _ in range(k + 1):
        hop = np.array([min(int(at[i]) + int(look[i, j]) for i in range(k)
                            if i != j and at[i] < NEVER) for j in range(k)])
        at = np.minimum(at, hop)
    for j in range(k):
        bound = min(int(at[i] + look[i, j]) for i in range(k) if i != j)
        assert ends[j] <= bound and ends[j] % d == 0
        assert bound - ends[j] < d                   # and no more conservative than the grid
    first = int(nxt.min())
    assert ends[int(nxt.argmin())] > first           # the earliest shard makes progress
    assert (window_ends(nxt, reach, d, 5 * d, NEVER) <= first + 5 * d).all()
    assert (window_ends(nxt, reach, d, 10 ** 9, 60 * d) <= 60 * d).all()


def test_the_cheaper_bound_is_exact_for_the_earliest_and_never_above():
    rng = np.random.default_rng(8)
    k = 40
    reach = reach_matrix(rng.integers(2_000, 50_000, (k, k)).astype(np.int64))
    reach_min = reach.min(axis=0)
    for _ in range(20):
        nxt = rng.integers(0, 1_000_000, k).astype(np.int64)
        nxt[rng.random(k) < 0.3] = NEVER
        exact = earliest_causes(nxt, reach)
        for m in (1, 3, 10, k):
            bound = earliest_causes(nxt, reach, reach_min, m)
            assert (bound <= exact).all()
            # the m earliest shards' chains are followed exactly: nothing they cause is lost
            first = np.argsort(nxt, kind="stable")[:m]
            first = first[nxt[first] < NEVER]
            if len(first):
                assert (bound <= (nxt[first, None] + reach[first]).min(axis=0)).all()
            if m >= (nxt < NEVER).sum():
                assert bound.tolist() == exact.tolist()
    # no shard with events: nothing to bound
    assert earliest_causes(np.full(k, NEVER), reach, reach_min, 1).tolist() == [NEVER] * k


def test_a_shard_alone_with_events_is_bounded_by_its_round_trip():
    # shard 0 busy at 0, shard 1 idle: 0's message reaches 1 at >= 5d and the reply can be
    # back at 0 at 5d + 7d, so 0 may not run past 12d (the one-hop bound would be the cap)
    d = 1_000
    look = np.array([[NEVER, 5 * d], [7 * d, NEVER]], np.int64)
    reach = reach_matrix(look)
    assert reach.tolist() == [[12 * d, 5 * d], [7 * d, 12 * d]]
    ends = window_ends(np.array([0, NEVER], np.int64), reach, d, 10 ** 9, NEVER)
    assert ends.tolist() == [12 * d, 5 * d]


def _heads(rows):
    """Joined heads (emulator/heads.py) of (shard, next, left, reached, pushed) rows."""
    return heads.read(heads.join(
        [heads.head(k, nxt, {"left": left, "reached": reached, "pushed": pushed,
                             "sent_min": {}, "done_until": 0, "events": 0,
                             "python_events": 0, "windows": 1,
                             "promises": 0, "wants": 0, "busy_s": 0.0, "cpu_s": 0.0,
                             "wait_s": 0.0})
         for k, nxt, left, reached, pushed in rows]))


def test_a_shard_that_left_early_is_bounded_by_what_its_peers_pushed_it():
    # round to limit 100: shard 1 left at 40, shard 2 left at 70, shards 0 and 3 ran to the
    # limit; what they report having pushed for before the limit, as (peer, first, last)
    nxt = np.array([100, 90, NEVER, 200], np.int64)        # what each reported of its queue
    fixed, _, pushed = _heads([(0, 100, False, 100, [(1, 20, 30), (2, 50, 80)]),
                               (1, 90, True, 40, [(0, 60, 95)]),
                               (2, NEVER, True, 70, [(1, 30, 120), (3, 10, 99)]),
                               (3, 200, False, 100, [(2, 60, 65)])])
    assert fixed["shard"].tolist() == [0, 1, 2, 3] and len(pushed) == 6
    assert bound_left(nxt, fixed, pushed) == 2
    # shard 1 ran all of (20, 30) before it stopped at 40; of (30, 120) nothing before 40
    # can wait in its inbox: its next event is at least 40. Shard 2 may not have run
    # (50, 80) past its stop at 70, but did run all of (60, 65). Shards that ran to the
    # limit ran everything pushed to them before it (and report the rest in sent_min).
    assert nxt.tolist() == [100, 40, 70, 200]
    assert bound_left(nxt, fixed, pushed) == 0         # nothing left to lower


def test_heads_of_a_subtree_join_in_any_order_and_keep_every_field():
    # a relay joins its children's heads as they come back; the driver reads them by shard
    a = heads.head(3, 500, {"left": True, "reached": 40, "pushed": [(1, 2, 3)],
                            "sent_min": {0: 700, 2: 650}, "done_until": 38, "events": 12,
                            "python_events": 3, "windows": 4, "promises": 5, "wants": 1,
                            "busy_s": 0.25, "cpu_s": 0.125, "wait_s": 2.5})
    b = heads.head(0, NEVER, {"left": False, "reached": 100, "pushed": [],
                              "sent_min": {}, "done_until": 98, "events": 0,
                              "python_events": 0, "windows": 1, "promises": 0, "wants": 0,
                              "busy_s": 0.0, "cpu_s": 0.0, "wait_s": 0.0})
    fixed, sent, pushed = heads.read(heads.join([heads.join([b]), a]))
    assert fixed["shard"].tolist() == [0, 3] and fixed["next"].tolist() == [NEVER, 500]
    assert fixed["left"].tolist() == [0, 1] and fixed["reached"].tolist() == [100, 40]
    assert fixed["events"].sum() == 12 and fixed["wait_s"].tolist() == [0.0, 2.5]
    assert fixed["python_events"].tolist() == [0, 3]
    assert sorted(map(tuple, sent.tolist())) == [(0, 700), (2, 650)]
    assert pushed.tolist() == [[1, 2, 3]]


def test_a_round_tally_keeps_next_events_and_the_phase_totals():
    # the driver's bookkeeping of two rounds (Emulator.run): shards' next events, lowered
    # by arrivals pushed for after the round and, after an early leave, by bound_left
    nxt = np.array([NEVER, NEVER, 300], np.int64)
    tally = heads.RoundTally(nxt)
    stats = {"left": False, "reached": 100, "pushed": [], "done_until": 98, "events": 7,
             "python_events": 2, "windows": 3, "promises": 2, "wants": 1, "busy_s": 0.5,
             "cpu_s": 0.25, "wait_s": 0.125}
    r1 = heads.join([heads.head(0, 150, {**stats, "sent_min": {1: 120}}),
                     heads.head(1, 400, {**stats, "sent_min": {0: 130}, "windows": 5})])
    assert heads.count(r1) == 2 and not tally.add(r1)
    assert nxt.tolist() == [130, 120, 300]
    r2 = heads.join([heads.head(1, 500, {**stats, "left": True, "reached": 140, "sent_min": {},
                                         "done_until": 138, "pushed": []}),
                     heads.head(2, 600, {**stats, "sent_min": {}, "done_until": 198,
                                         "pushed": [(1, 135, 160)]})])
    assert tally.add(r2)          # shard 1 left at 140 with (135, 160) maybe still queued
    assert nxt.tolist() == [130, 140, 600]
    # windows: the busiest shard of each round (5, then 3)
    assert (tally.events, tally.windows, tally.promises, tally.wants) == (28, 8, 8, 4)
    assert tally.python_events == 8
    assert (tally.done_until, tally.early, tally.bounded) == (198, 1, 1)
    assert tally.per_shard["busy_s"].tolist() == [0.5, 1.0, 0.5]
    assert tally.per_shard["wait_s"].tolist() == [0.125, 0.25, 0.125]


def test_lookahead_matrix_is_the_least_latency_between_parts():
    from emulator import RouterLatency
    from topologies import make_topology
    topo = make_topology("ts600", 1, 300)
    lat = RouterLatency.from_topology(topo)
    from topologies.partition import partition_routers
    part = partition_routers(topo, 4)[topo.host_router]
    look = lat.lookahead_matrix_us(part)
    every = lat.latency(np.arange(300)[:, None], np.arange(300)[None, :])
    for i in range(4):
        for j in range(4):
            if i != j:
                assert look[i, j] == every[np.ix_(part == i, part == j)].min()
    assert (np.diag(look) == NEVER).all()
    assert lat.cross_lookahead_us(part) == look.min()


@pytest.fixture(scope="module")
def ts5050():
    from topologies import make_topology
    return make_topology("ts5050", 2, 20_000)


@pytest.mark.parametrize("k", [2, 16, 64, 300, 800])
def test_partition_for_many_shards_balances_and_keeps_domains_whole(ts5050, k):
    from topologies.partition import partition_routers
    topo = ts5050
    part = partition_routers(topo, k)
    assert part.min() == 0 and part.max() == k - 1 and len(np.unique(part)) == k
    hosts = np.bincount(part[topo.host_router], minlength=k)
    assert hosts.max() <= 3 * 20_000 / k + 60          # balanced up to one unit's weight
    if k <= 300:
        # a domain lighter than a part's share is never cut in two
        dom = topo.router_domain
        w = np.bincount(topo.host_router, minlength=topo.n_routers)
        for d in np.unique(dom):
            r = dom == d
            if w[r].sum() <= 20_000 / k:
                assert len(np.unique(part[r])) == 1


def test_oracle_slice_whose_small_groups_share_the_next_digit():
    # many shards make slices where a querier's only prefix-group peers also share the next
    # digit (no candidate for that row); K = 16 of a 10k-node run hit this
    from actors.pastry.oracle import oracle_state
    top = [0x1230, 0x1231, 0x2000, 0x3000]            # first 16 bits of four ids
    hi = np.array([t << 48 for t in top], np.uint64)
    lo = np.zeros(4, np.uint64)
    dist = np.array([[0, 5], [5, 0]], np.int32)
    st = oracle_state(np.array([0]), hi, lo, np.array([0, 1, 0, 1]), dist, 1000)
    assert st.rt[0, 0, 2] == 2 and st.rt[0, 0, 3] == 3   # row 0: the other first digits
    assert (st.rt[0, 1:3] == -1).all()                   # rows 1, 2: node 1 shares them


def test_automatic_shard_count_is_one_per_cpu_and_at_most_one_per_10k_nodes():
    auto, per = runner_mod.auto_shards, runner_mod.MIN_NODES_PER_SHARD
    assert per == 10_000
    assert auto(2, 3_000) == 1            # a small overlay runs whole
    assert auto(2, 10_000) == 1 and auto(2, 19_999) == 1 and auto(2, 20_000) == 2
    assert auto(2, 50_000) == 2           # small_groups_30k --bootstrap oracle: one per CPU
    assert auto(64, 1_000_000) == 64 and auto(256, 1_000_000) == 100
    assert auto(8, 5) == 1 and auto(0, 100_000) == 1


def test_a_protocol_built_overlay_gets_a_shard_per_100k_nodes():
    """The join's sparse windows cost every shard an exchange: the published scenarios on
    the join run on one shard of a two-core machine, a million nodes on ten at most."""
    auto = runner_mod.auto_shards
    assert runner_mod.MIN_NODES_PER_SHARD_PROTOCOL == 100_000
    assert auto(2, 3_000, protocol=True) == 1          # churn
    assert auto(2, 50_000, protocol=True) == 1         # small_groups_30k
    assert auto(2, 100_000, protocol=True) == 1        # paper_zipf_1500
    assert auto(2, 200_000, protocol=True) == 2
    assert auto(64, 1_000_000, protocol=True) == 10 and auto(4, 1_000_000, protocol=True) == 4
