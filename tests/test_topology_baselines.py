"""IP multicast / naive unicast baselines and the locality partition."""
import numpy as np
import pytest

from emulator.latency import RouterLatency
from topologies import Topology, TopologyError, attach_hosts, generate_transit_stub
from topologies.baselines import ip_multicast, naive_unicast
from topologies.partition import partition_routers


def hand_tree():
    # routers: 0 -1ms- 1, 1 -2ms- 2, 1 -3ms- 3 ; hosts: h0@0 h1@2 h2@3 h3@3 h4@0
    return Topology.from_edges(4, [0, 1, 1], [1, 2, 3], [1000, 2000, 3000],
                               [0, 2, 3, 3, 0], lan_us=1000)


def test_ip_multicast_by_hand():
    delays, links, counts = ip_multicast(hand_tree(), 0, [1, 2, 3, 4, 0])
    assert delays.tolist() == [5000, 6000, 6000, 2000, 0]
    # core 0->1 (id 0), 1->2 (2), 1->3 (4); LAN up of h0 (6); down of h1..h4 (9, 11, 13, 15)
    assert links.tolist() == [0, 2, 4, 6, 9, 11, 13, 15]
    assert counts.tolist() == [1] * 8


def test_naive_unicast_by_hand():
    delays, links, counts = naive_unicast(hand_tree(), 0, [1, 2, 3, 4])
    assert delays.tolist() == [5000, 6000, 6000, 2000]
    assert dict(zip(links.tolist(), counts.tolist(), strict=True)) == {
        0: 3, 2: 1, 4: 2, 6: 4, 9: 1, 11: 1, 13: 1, 15: 1}
    # from a leaf the routes go the other way: reverse ids
    _, links2, counts2 = naive_unicast(hand_tree(), 1, [2, 0])
    assert dict(zip(links2.tolist(), counts2.tolist(), strict=True)) == {
        1: 1, 3: 2, 4: 1, 8: 2, 7: 1, 11: 1}


def test_baselines_agree_with_path_links_on_transit_stub():
    topo = attach_hosts(generate_transit_stub(preset="ts600", seed=7), 2000, seed=7)
    rng = np.random.default_rng(3)
    members = rng.choice(2000, 300, replace=False)
    src = int(members[0])
    per_member = [topo.path_links(src, int(m)) for m in members]
    all_links = np.concatenate(per_member)
    ids, cnt = np.unique(all_links, return_counts=True)
    d, l, c = naive_unicast(topo, src, members)
    assert np.array_equal(l, ids) and np.array_equal(c, cnt)
    assert np.array_equal(d, topo.latency(np.full(300, src), members))
    _, l2, c2 = ip_multicast(topo, src, members)
    assert np.array_equal(l2, ids) and c2.sum() == len(ids) < c.sum()


def test_baselines_refuse_latency_matrix():
    topo = Topology.from_latency_matrix(np.array([[0, 5000], [5000, 0]]), [0, 1])
    assert not topo.has_paths
    assert topo.latency(0, 1) == 7000
    with pytest.raises(TopologyError, match="not available"):
        ip_multicast(topo, 0, [1])
    with pytest.raises(TopologyError, match="no router paths"):
        topo.path_links(0, 1)


@pytest.fixture(scope="module")
def ts5050():
    """ts5050 (seed 1) with its routing tables built: the tests attach their hosts to it
    (attach_hosts shares the tables; the placement depends only on the counts and seed)."""
    core = attach_hosts(generate_transit_stub(preset="ts5050", seed=1), 1, seed=1)
    core.dist_matrix()
    return core


def test_partition_keeps_stubs_whole_and_balances_hosts(ts5050):
    topo = attach_hosts(ts5050, 20000, seed=1)
    part = partition_routers(topo, 4)
    assert part.dtype == np.int32 and set(np.unique(part)) == {0, 1, 2, 3}
    dom = topo.router_domain
    for d in np.unique(dom):
        assert len(np.unique(part[dom == d])) == 1
    hosts_per_part = np.bincount(part[topo.host_router], minlength=4)
    assert hosts_per_part.max() / hosts_per_part.min() < 1.1
    # locality: cross-part lookahead beats a random partition of the same routers
    lat = RouterLatency.from_topology(topo)
    look = lat.cross_lookahead_us(part[topo.host_router])
    rand = np.random.default_rng(0).integers(0, 4, topo.n_hosts)
    assert lat.cross_lookahead_us(rand) == 2 * topo.lan_us
    assert look > 2 * topo.lan_us


def test_partition_of_whole_regions_when_they_balance(ts5050, monkeypatch):
    # ts5050: 10 transit regions; 2 and 4 parts of whole regions balance within the slack,
    # and cutting only between regions at least triples the lookahead of a cut through one
    import topologies.partition as partition
    from topologies.partition import REGION_SLACK, REGION_SLACKS, _even_out
    topo = attach_hosts(ts5050, 100_000, seed=1)
    lat = RouterLatency.from_topology(topo)
    region = topo.router_region
    for k in (2, 4):
        part = partition_routers(topo, k)
        for g in np.unique(region):
            assert len(np.unique(part[region == g])) == 1
        hosts = np.bincount(part[topo.host_router], minlength=k)
        assert hosts.max() <= (1 + REGION_SLACK) * topo.n_hosts / k
        assert lat.cross_lookahead_us(part[topo.host_router]) >= 3 * 8000
    # which regions go together: at k = 2 the cut is, under the tightest slack that keeps
    # 3/4 of the lookahead the loosest allows, the one farthest from any pair of regions;
    # found here by trying every split of the 10 regions
    reg_hosts = region[topo.host_router]
    look = lat.lookahead_matrix_us(reg_hosts)
    w = np.bincount(reg_hosts)
    best = dict.fromkeys(REGION_SLACKS, 0)
    for mask in range(1, 2 ** (len(w) - 1)):
        side = (mask >> np.arange(len(w))) & 1 == 1
        for slack in REGION_SLACKS:
            if max(w[side].sum(), w[~side].sum()) <= (1 + slack) * topo.n_hosts / 2:
                best[slack] = max(best[slack], look[np.ix_(side, ~side)].min())
    assert best[REGION_SLACK] == 130_000 > 24_000 == look.min()   # the closest pair is split
    assert best[0.01] == 126_000                  # 1 % over an even share: a little closer
    # (the longest-processing-time deal found no 1 % split farther than 105 ms)
    for kept in (partition.LOOKAHEAD_KEPT, 0.99):
        # a slack whose best cut keeps less than LOOKAHEAD_KEPT of the loosest's is passed over
        slack = next(x for x in REGION_SLACKS if best[x] >= kept * best[REGION_SLACK])
        assert slack == (0.01 if kept < 0.95 else REGION_SLACK)
        with monkeypatch.context() as m:
            m.setattr(partition, "LOOKAHEAD_KEPT", kept)
            part2 = partition_routers(topo, 2)[topo.host_router]
        assert lat.cross_lookahead_us(part2) == best[slack]
        assert np.bincount(part2).max() <= (1 + slack) * topo.n_hosts / 2
    # 8 parts cannot be balanced from 10 regions: domains are the units again
    part8 = partition_routers(topo, 8)
    assert max(len(np.unique(part8[region == g])) for g in np.unique(region)) > 1
    # the evening-out reaches the best split of a case the greedy deal misses
    w = np.array([5990, 7943, 5824, 13978, 15934, 10024, 10217, 7957, 8036, 14097], float)
    part_of = np.array([3, 0, 2, 2, 0, 3, 3, 1, 2, 1], np.int32)   # the greedy deal
    load = np.bincount(part_of, weights=w, minlength=4)
    assert load.max() == 27838
    _even_out(part_of, w, load)
    assert np.array_equal(load, np.bincount(part_of, weights=w, minlength=4))
    assert load.max() == 25924                   # {10024, 7957, 7943}: within 4 % of even


def test_cross_lookahead_by_hand():
    topo = hand_tree()                    # hosts on routers 0, 2, 3, 3, 0
    lat = RouterLatency.from_topology(topo)
    assert lat.cross_lookahead_us([0, 1, 1, 1, 0]) == 2000 + 3000
    assert lat.cross_lookahead_us([0, 0, 1, 1, 0]) == 2000 + 4000   # routers 0 and 3
    assert lat.cross_lookahead_us([0, 1, 0, 1, 0]) == 2000      # router 3 in both parts
    look = lat.lookahead_matrix_us([0, 0, 1, 1, 2])              # per pair of parts
    assert look[0, 1] == look[1, 0] == look[1, 2] == 2000 + 4000 and look[0, 2] == 2000
    assert lat.cross_lookahead_us([0] * 5) == np.iinfo(np.int64).max   # one part


def test_partition_for_many_shards_keeps_close_domains_together(ts5050, monkeypatch):
    # k above the 10 regions of ts5050: domains are cut in region order; a few domains of
    # different regions' cuts lie close (a transit router 1 us from another domain's stub
    # router), and joining those first raises the lookahead the closest pair of parts sets
    import topologies.partition as partition
    topo = attach_hosts(ts5050, 10_000, seed=1)
    lat = RouterLatency.from_topology(topo)
    dom = topo.router_domain
    for k in (16, 64):
        part = partition_routers(topo, k)
        with monkeypatch.context() as m:
            m.setattr(partition, "MAX_SPACED_UNITS", 0)    # the cut of the domains alone
            alone = partition_routers(topo, k)
        assert set(np.unique(part)) == set(range(k))
        assert all(len(np.unique(part[dom == d])) == 1 for d in np.unique(dom))
        hosts = np.bincount(part[topo.host_router], minlength=k)
        hosts_alone = np.bincount(alone[topo.host_router], minlength=k)
        assert hosts.max() <= max(1.05 * topo.n_hosts / k, hosts_alone.max())
        look = lat.cross_lookahead_us(part[topo.host_router])
        look_alone = lat.cross_lookahead_us(alone[topo.host_router])
        assert look > 2 * look_alone, (k, look, look_alone)   # 23 vs 8 ms, 8 vs 2 ms
        # still a cut by region: most pairs of parts are far apart (few bind each other)
        pairs = lat.lookahead_matrix_us(part[topo.host_router])[np.triu_indices(k, 1)]
        assert np.median(pairs) > 10 * look


def test_two_way_split_is_the_most_even_split():
    # against every split of small random weights (zeros and ties included)
    from topologies.partition import _two_way_split
    rng = np.random.default_rng(3)
    for _ in range(200):
        w = rng.integers(0, 30, rng.integers(1, 9))
        total = int(w.sum())
        splits = [m for m in range(1, 2 ** len(w) - 1)]
        heavier = [max(s, total - s) for m in splits
                   for s in [int(w[(m >> np.arange(len(w))) & 1 == 1].sum())]
                   if 0 < s < total]
        part = _two_way_split(w)
        if not heavier:
            assert part is None
            continue
        load = np.bincount(part, weights=w, minlength=2)
        assert load.sum() == total and load.min() > 0
        assert load.max() == min(heavier)
