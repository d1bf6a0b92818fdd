"""Measured-topology loaders: shared data sets (skipped when absent) and malformed files."""
import tarfile
from pathlib import Path

import numpy as np
import pytest

from topologies import TopologyError, attach_hosts, make_topology
from topologies.loaders import (
    load_edge_csv,
    load_latency_matrix,
    load_rocketfuel,
    load_zoo,
    read_rocketfuel_latencies,
)

MEASURED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "measured"
needs_data = pytest.mark.skipif(not MEASURED.is_dir(),
                                reason=f"measured data sets not found at {MEASURED}")


@needs_data
def test_rocketfuel_with_inferred_latencies():
    lat = read_rocketfuel_latencies(MEASURED / "rocketfuel-weights-dist.tar.gz", "1755")
    assert lat and all(1000 <= v <= 64000 for v in lat.values())
    g = load_rocketfuel(MEASURED / "rocketfuel-cch.tar.gz", "1755", latencies=lat)
    assert 250 < g.n_routers <= 300 and g.n_edges > g.n_routers - 1
    assert g.meta["links_measured_city_pair"] > 0 and g.meta["links_same_city"] > 0
    assert g.edge_policy is None
    topo = attach_hosts(g, 500, seed=1)
    d = topo.describe()
    assert d["policy_routes_longer_than_min_delay"] == 0      # delay routing
    same_city = g.router_domain[g.edge_src] == g.router_domain[g.edge_dst]
    assert np.all(g.edge_delay_us[same_city] == 500)
    with pytest.raises(TopologyError, match="needs an AS"):
        load_rocketfuel(MEASURED / "rocketfuel-cch.tar.gz")
    with pytest.raises(TopologyError, match="no 99999.cch"):
        load_rocketfuel(MEASURED / "rocketfuel-cch.tar.gz", "99999")


@needs_data
def test_planetlab_matrix_and_make_topology_cache(tmp_path):
    src = f"planetlab:{MEASURED / 'PlanetLabData_1.gz'}"
    topo = make_topology(src, 0, 2000, cache_dir=tmp_path)
    assert topo.n_routers == 490 and not topo.has_paths
    m = topo.dist_matrix()
    assert np.array_equal(m, m.T) and m.diagonal().max() == 0
    assert 40_000 < np.median(m) < 90_000      # median RTT 135 ms -> one way ~67 ms
    again = make_topology(src, 0, 2000, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.npz"))) == 1
    assert np.array_equal(again.latency(np.arange(50), np.arange(50, 100)),
                          topo.latency(np.arange(50), np.arange(50, 100)))


@needs_data
def test_topology_zoo_graphml(tmp_path):
    with tarfile.open(MEASURED / "topologyzoo-graphml.tar.gz") as tar:
        tar.extract("graphml/Abilene.graphml", tmp_path, filter="data")
    g = load_zoo(tmp_path / "graphml" / "Abilene.graphml")
    assert g.n_routers == 11 and g.n_edges == 14
    # New York - Washington DC is about 330 km: ~1.65 ms at 2/3 c
    assert 100 <= g.edge_delay_us.min() and g.edge_delay_us.max() < 20_000
    topo = attach_hosts(g, 30, seed=0)
    assert topo.latency(0, 1) > 0 or topo.host_router[0] == topo.host_router[1]


def test_edge_csv_and_errors(tmp_path):
    f = tmp_path / "e.csv"
    f.write_text("src,dst,latency_ms\na,b,1.5\nb,c,2\nx,y,3\n")
    g = load_edge_csv(f)
    assert g.n_routers == 3 and g.edge_delay_us.tolist() == [1500, 2000]  # x-y dropped
    topo = make_topology(f"edges:{f}", 0, 4, cache_dir=None)
    assert topo.router_dist_us(0, 2) == 3500
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,1\nb,c,oops\n")
    with pytest.raises(TopologyError, match=r"bad.csv:2: latency 'oops'"):
        load_edge_csv(bad)
    bad.write_text("a,b,1\nb,c\n")
    with pytest.raises(TopologyError, match=r"bad.csv:2: expected"):
        load_edge_csv(bad)
    bad.write_text("a,b,-1\n")
    with pytest.raises(TopologyError, match=r"bad.csv:1: latency must be a positive"):
        load_edge_csv(bad)


def test_malformed_matrix_cch_latencies(tmp_path):
    m = tmp_path / "m.txt"
    m.write_text("0\t10\n10\t0\t5\n")
    with pytest.raises(TopologyError, match=r"m.txt:2: 3 columns, expected 2"):
        load_latency_matrix(m)
    m.write_text("0 10\n10 x\n")
    with pytest.raises(TopologyError, match=r"m.txt:2: 'x' is not a number"):
        load_latency_matrix(m)
    m.write_text("0 10 -1\n10 0 4\n-1 4 0\n")          # one gap, filled through site 1
    mat, meta = load_latency_matrix(m)
    assert meta["filled_entries"] == 2 and mat[0, 2] == 5000 + 2000
    c = tmp_path / "x.cch"
    c.write_text("0 @A,+B  bb\t(1) -> <1> \t=1.2.3.4 r0\ngarbage line\n")
    with pytest.raises(TopologyError, match=r"x.cch:2: not a .cch router line"):
        load_rocketfuel(c)
    lat = tmp_path / "latencies.intra"
    lat.write_text("A,+B1 C,+D2 3\nA,+B1 C,+D2\n")
    with pytest.raises(TopologyError, match=r"latencies.intra:2: expected"):
        read_rocketfuel_latencies(lat)
    with pytest.raises(TopologyError, match="unknown topology source"):
        make_topology("nosuch:thing", 0, 1)


def test_small_cch_with_latency_rule(tmp_path):
    c = tmp_path / "7.cch"
    c.write_text(
        "0 @Seattle,+WA + bb\t(2) -> <1> <2> \t=a r0\n"
        "1 @Seattle,+WA + bb\t(2) -> <0> <3> {-5} \t=b r0\n"
        "2 @Chicago,+IL + bb\t(2) -> <0> <3> \t=c r0\n"
        "3 @Dallas,+TX + bb\t(2) -> <1> <2> \t=d r0\n"
        "-5 =9.9.9.9 r1\n")
    lat = tmp_path / "latencies.intra"
    lat.write_text("Seattle,+WA10 Chicago,+IL20 30\nChicago,+IL20 Dallas,+TX30 12\n"
                   "Seattle,+WA11 Chicago,+IL21 28\n")
    g = load_rocketfuel(c, latencies=lat)
    d = {(int(a), int(b)): int(x) for a, b, x in zip(g.edge_src, g.edge_dst, g.edge_delay_us,
                                                     strict=True)}
    assert d[(0, 1)] == 500            # same city
    assert d[(0, 2)] == 28000          # smallest measured Seattle-Chicago
    assert d[(2, 3)] == 12000          # measured
    assert d[(1, 3)] == 40000          # Seattle-Dallas unmeasured: via Chicago 28 + 12


def test_figures_write_pngs(tmp_path):
    from topologies import generate_transit_stub
    from topologies.figures import plot_delay_distribution, plot_layout
    topo = attach_hosts(generate_transit_stub(preset="ts600", seed=0), 200, seed=0)
    for fn, name in ((plot_layout, "layout.png"), (plot_delay_distribution, "delay.png")):
        p = fn(topo, tmp_path / name)
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
