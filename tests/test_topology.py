"""Core Topology: hand-built graphs, latency, paths, persistence."""
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from topologies import Topology, TopologyError, attach_hosts, generate_transit_stub


def line_topology(policy=None):
    # 0 -1ms- 1 -2ms- 2 -4ms- 3, plus a 10 ms shortcut 0-3
    src, dst = [0, 1, 2, 0], [1, 2, 3, 3]
    delay = [1000, 2000, 4000, 10000]
    hosts = [0, 3, 3, 1]
    return Topology.from_edges(4, src, dst, delay, hosts, policy_weight=policy, lan_us=500)


def test_latency_is_lan_core_lan_and_zero_on_same_host():
    topo = line_topology()
    # host0@r0 -> host1@r3: min delay via 0-1-2-3 = 7 ms (< 10 ms shortcut)
    assert topo.latency(0, 1) == 500 + 7000 + 500
    assert topo.latency(1, 2) == 1000          # same router, two LAN links
    assert topo.latency(2, 2) == 0
    lat = topo.latency(np.array([0, 1, 3]), np.array([1, 0, 0]))
    assert lat.dtype == np.int64 and lat.tolist() == [8000, 8000, 2000]
    assert topo.router_dist_us([0, 3], [3, 1]).tolist() == [7000, 6000]
    assert topo.min_latency_us == 1000


def test_policy_weights_override_delay_with_delay_tiebreak():
    # shortcut 0-3 has policy 1 while each line edge has policy 1 too: 1 hop beats 3 hops
    topo = line_topology(policy=[1, 1, 1, 1])
    assert topo.router_dist_us(0, 3) == 10000
    links = topo.path_links(0, 1)
    assert links.tolist() == [2 * 4 + 0, 2 * 3, 2 * 4 + 2 * 1 + 1]   # edge 3 is 0-3


def test_path_links_ids_and_delay_sum():
    topo = line_topology()
    links = topo.path_links(0, 1)
    e = {(int(a), int(b)): i
         for i, (a, b) in enumerate(zip(topo.edge_src, topo.edge_dst, strict=True))}
    expected_core = [2 * e[(0, 1)], 2 * e[(1, 2)], 2 * e[(2, 3)]]
    E = topo.n_edges
    assert links.tolist() == [2 * E + 0] + expected_core + [2 * E + 2 * 1 + 1]
    back = topo.path_links(1, 0)
    assert back.tolist() == [2 * E + 2] + [x + 1 for x in expected_core[::-1]] + [2 * E + 1]
    assert topo.link_delay_us()[links].sum() == topo.latency(0, 1)
    assert topo.path_links(2, 2).size == 0
    assert topo.n_links == 2 * 4 + 2 * 4


def test_min_latency_without_shared_router():
    topo = Topology.from_edges(3, [0, 1], [1, 2], [3000, 5000], [0, 2], lan_us=1000)
    assert topo.min_latency_us == 2000 + 8000


def test_bad_input_raises_clear_errors():
    with pytest.raises(TopologyError, match="outside"):
        Topology.from_edges(2, [0], [2], [1000], [0])
    with pytest.raises(TopologyError, match="positive"):
        Topology.from_edges(2, [0], [1], [0], [0])
    with pytest.raises(TopologyError, match="self-loop"):
        Topology.from_edges(2, [1], [1], [10], [0])
    topo = Topology.from_edges(3, [0], [1], [1000], [0, 2])
    with pytest.raises(TopologyError, match="not connected"):
        topo.latency(0, 1)
    with pytest.raises(TopologyError, match="host id"):
        line_topology().latency(0, 9)


def test_save_load_roundtrip(tmp_path):
    topo = attach_hosts(generate_transit_stub(preset="ts600", seed=1), 300, seed=1)
    lat = topo.latency(np.arange(300), np.arange(300)[::-1])
    topo.save(tmp_path / "t.npz")
    back = Topology.load(tmp_path / "t.npz")
    assert back.routes.kind == "dense" and back._routes is not None   # tables stored
    assert np.array_equal(back.latency(np.arange(300), np.arange(300)[::-1]), lat)
    assert np.array_equal(back.path_links(3, 7), topo.path_links(3, 7))
    assert back.graph.meta == topo.graph.meta
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(TopologyError, match="bad.npz"):
        Topology.load(tmp_path / "bad.npz")


def test_save_leaves_another_writers_file_alone(tmp_path):
    """Runs sharing the topology cache may save the same file at once: each writes its own
    temporary file, so one never renames away or overwrites the other's half-written one."""
    topo = line_topology()
    target = tmp_path / "t.npz"
    others = [tmp_path / "t.npz.tmp.npz", tmp_path / "t.npz.1.tmp.npz"]
    for other in others:
        other.write_bytes(b"another process, half-way")
    topo.save(target)
    assert all(o.read_bytes() == b"another process, half-way" for o in others)
    assert np.array_equal(Topology.load(target).latency([0], [1]), topo.latency([0], [1]))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["t.npz"] + [o.name for o in others])


def test_threads_saving_one_topology_at_once(tmp_path):
    """The warm-up builds its two workloads in threads of one process, each of which may
    save the same cached topology: every save succeeds and leaves one whole file."""
    topo = attach_hosts(generate_transit_stub(preset="ts600", seed=1), 300, seed=1)
    target = tmp_path / "t.npz"
    n = 4
    start = threading.Barrier(n)

    def save():
        start.wait()
        topo.save(target)

    for _ in range(3):
        with ThreadPoolExecutor(n) as pool:
            for f in [pool.submit(save) for _ in range(n)]:
                f.result()
        assert [p.name for p in tmp_path.iterdir()] == ["t.npz"]
        assert np.array_equal(Topology.load(target).latency([0, 5], [7, 9]),
                              topo.latency([0, 5], [7, 9]))


def test_lazy_routes_match_dense():
    g = generate_transit_stub(preset="ts600", seed=2)
    dense = attach_hosts(g, 200, seed=5)
    lazy = Topology(g, dense.host_router, dense_limit=100)
    a = np.arange(200)
    b = (a * 7 + 3) % 200
    assert lazy.routes.kind == "lazy"
    assert np.array_equal(lazy.latency(a, b), dense.latency(a, b))
    assert np.array_equal(lazy.path_links(4, 150), dense.path_links(4, 150))
    pa, la = lazy.route_links(dense.host_router[a], dense.host_router[b])
    pb, lb = dense.route_links(dense.host_router[a], dense.host_router[b])
    assert np.array_equal(pa, pb) and np.array_equal(la, lb)
    assert lazy.min_latency_us == dense.min_latency_us
    with pytest.raises(TopologyError, match="dense"):
        lazy.dist_matrix()


def test_route_links_consistent_with_path_links():
    topo = attach_hosts(generate_transit_stub(preset="ts600", seed=4), 500, seed=4)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 500, 300), rng.integers(0, 500, 300)
    pair, link = topo.route_links(topo.host_router[a], topo.host_router[b])
    delays = topo.link_delay_us()
    per_pair = np.bincount(pair, weights=delays[link], minlength=300)
    expect = topo.router_dist_us(topo.host_router[a], topo.host_router[b])
    assert np.array_equal(per_pair.astype(np.int64), expect)
    for i in range(0, 300, 37):
        pl = topo.path_links(a[i], b[i])
        if a[i] != b[i]:
            assert np.array_equal(pl[1:-1], link[pair == i])
            assert delays[pl].sum() == topo.latency(a[i], b[i])
