"""GT-ITM transit-stub generator: structure, policy routing, delays, determinism."""
from dataclasses import replace

import numpy as np
import pytest

from topologies import (
    PRESETS,
    GeoParams,
    TopologyError,
    TransitStubSpec,
    attach_hosts,
    generate_transit_stub,
)
from topologies.graph import INTRA_STUB, INTRA_TRANSIT, TRANSIT_STUB, TRANSIT_TRANSIT
from topologies.transit_stub import derived_scales, randomize_sizes


def test_derived_scales_match_gt_itm():
    assert derived_scales(PRESETS["ts5050"]) == (636, 318, 75)
    assert derived_scales(PRESETS["ts600"]) == (219, 110, 52)


def test_randomize_sizes_exact_sum_and_positive():
    rng = np.random.default_rng(1)
    s = randomize_sizes(rng, 50, 10, 150)
    assert s.sum() == 500 and s.min() >= 1 and s.std() > 0


@pytest.mark.parametrize("preset,n,t_domains,transit,stubs", [
    ("ts600", 600, 3, 24, 72), ("ts5050", 5050, 10, 50, 500)])
def test_counts_and_domain_structure(preset, n, t_domains, transit, stubs):
    g = generate_transit_stub(preset=preset, seed=3)
    assert g.n_routers == n
    assert g.router_is_transit.sum() == transit
    assert len(np.unique(g.router_domain[g.router_is_transit])) == t_domains
    assert len(np.unique(g.router_domain[~g.router_is_transit])) == stubs
    # stub domains: one T-S edge each, to a transit router of their own region
    ts = g.edge_class == TRANSIT_STUB
    assert ts.sum() == stubs
    a, b = g.edge_src[ts], g.edge_dst[ts]
    assert np.all(g.router_is_transit[a] != g.router_is_transit[b])
    assert np.all(g.router_region[a] == g.router_region[b])
    # intra edges stay inside one domain, inter-domain edges join transit routers
    intra = np.isin(g.edge_class, [INTRA_STUB, INTRA_TRANSIT])
    assert np.all(g.router_domain[g.edge_src[intra]] == g.router_domain[g.edge_dst[intra]])
    tt = g.edge_class == TRANSIT_TRANSIT
    assert np.all(g.router_is_transit[g.edge_src[tt]] & g.router_is_transit[g.edge_dst[tt]])
    assert np.all(g.router_domain[g.edge_src[tt]] != g.router_domain[g.edge_dst[tt]])
    # connected (dense routing tables raise otherwise)
    topo = attach_hosts(g, 10, seed=0)
    assert topo.routes.dist.min() >= 0
    # policy weights as GT-ITM sets them
    m = g.meta
    assert m["w_tt"] == m["transit_diam"] // 2 + 1
    assert m["w_ss"] == m["stub_diam"] + 2 * m["w_ts"]
    assert set(np.unique(g.edge_policy[intra])) == {1}
    assert np.all(g.edge_policy[ts] == m["w_ts"])


def test_policy_routes_never_transit_a_stub_domain():
    # extra T-S and S-S edges give stubs several exits, so only the policy keeps them out
    spec = replace(PRESETS["ts600"], extra_ts=20, extra_ss=20)
    g = generate_transit_stub(spec=spec, seed=5)
    topo = attach_hosts(g, 1, seed=0)
    rng = np.random.default_rng(2)
    a = rng.integers(0, g.n_routers, 3000)
    b = rng.integers(0, g.n_routers, 3000)
    pair, link = topo.route_links(a, b)
    e = link // 2
    ends = np.where(link % 2 == 0, g.edge_dst[e], g.edge_src[e])   # router entered
    dom = g.router_domain
    stub_entered = ~g.router_is_transit[ends]
    # a stub router on a route must belong to the source's or the destination's stub
    bad = stub_entered & (dom[ends] != dom[a[pair]]) & (dom[ends] != dom[b[pair]])
    assert not bad.any()
    # with the policy ignored, min-delay routes do cut through stubs on this map
    mind = attach_hosts(type(g)(g.n_routers, g.edge_src, g.edge_dst, g.edge_delay_us,
                                edge_class=g.edge_class, router_domain=g.router_domain,
                                router_is_transit=g.router_is_transit), 1, seed=0)
    p2, l2 = mind.route_links(a, b)
    e2 = l2 // 2
    ends2 = np.where(l2 % 2 == 0, g.edge_dst[e2], g.edge_src[e2])
    bad2 = ~g.router_is_transit[ends2] & (dom[ends2] != dom[a[p2]]) & (dom[ends2] != dom[b[p2]])
    assert bad2.any()


def test_deterministic_per_seed():
    g1 = generate_transit_stub(preset="ts600", seed=11)
    g2 = generate_transit_stub(preset="ts600", seed=11)
    g3 = generate_transit_stub(preset="ts600", seed=12)
    for f in ("edge_src", "edge_dst", "edge_delay_us", "edge_policy", "router_domain"):
        assert np.array_equal(getattr(g1, f), getattr(g2, f))
    assert not (g1.n_edges == g3.n_edges and np.array_equal(g1.edge_src, g3.edge_src))
    h1 = attach_hosts(g1, 100, seed=4).host_router
    assert np.array_equal(h1, attach_hosts(g2, 100, seed=4).host_router)
    assert not np.array_equal(h1, attach_hosts(g1, 100, seed=5).host_router)


def test_custom_spec_with_waxman_and_extra_edges():
    spec = TransitStubSpec(top=GeoParams(2, 3, 1.0), transit=GeoParams(3, 2, 0.9, 0.6),
                           stub=GeoParams(4, 3, 0.7), stubs_per_transit=2,
                           extra_ts=3, extra_ss=2)
    g = generate_transit_stub(spec=spec, seed=1)
    assert g.n_routers == 2 * 3 * (2 * 4 + 1)
    assert g.meta["n_stub_domains"] == 12
    assert (g.edge_class == TRANSIT_STUB).sum() <= 12 + 3
    attach_hosts(g, 5, seed=1).routes        # noqa: B018 (builds the routes: connected)
    with pytest.raises(TopologyError, match="alpha"):
        generate_transit_stub(spec=TransitStubSpec(GeoParams(2, 3, 0), GeoParams(2),
                                                   GeoParams(2), 1), seed=0)
    with pytest.raises(TopologyError, match="unknown"):
        generate_transit_stub(preset="ts9", seed=0)


def test_describe_reports_structure():
    d = attach_hosts(generate_transit_stub(preset="ts600", seed=3), 400, seed=3).describe()
    assert d["routers"] == 600 and d["transit_routers"] == 24
    assert abs(d["mean_degree"] - 2 * d["core_edges"] / 600) < 1e-9
    assert 0 < d["policy_routes_longer_than_min_delay"] < 1
    assert d["mean_policy_stretch"] >= 1
    assert d["diameter_delay_ms"] > d["mean_router_delay_ms"] > 0
    assert d["mean_host_delay_ms"] > 2.0


@pytest.mark.slow
def test_mean_core_link_delay_ts5050_over_ten_seeds():
    means = [generate_transit_stub(preset="ts5050", seed=s).edge_delay_us.mean() / 1000
             for s in range(10)]
    assert abs(np.mean(means) - 40.7) <= 1.5, means
