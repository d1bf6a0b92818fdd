"""Analysis on a REAL transit-stub topology (ts600), checked against independent numpy
computations with the topology API and `topologies.baselines`.

The run directory holds `topology/topo-0.npz` written by `Topology.save` and read by the
analysis' default reader (no test reader). Trees are random (not Pastry's), which does not
matter: the metrics only see message rows, deliveries and the topology.
"""

from __future__ import annotations

import csv
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.physical import core_pair_loads, core_union_counts, default_reader, lan_base
from topologies import Topology, make_topology
from topologies.baselines import ip_multicast, naive_unicast

N_HOSTS = 400
SEED = 1
GROUP_SIZES = [200, 60, 11, 5]   # members per group (rank order), RP excluded


def _write(run_dir, table, phase, columns: dict):
    out = run_dir / "events" / table / "topo=0"
    out.mkdir(parents=True, exist_ok=True)
    n = len(next(iter(columns.values())))
    pq.write_table(pa.table({"phase": pa.array([phase] * n, pa.string()), **columns}),
                   out / f"{phase}-shard0.parquet")


def build_run(run_dir):
    """A run on ts600 with random trees; returns what the checks need."""
    topo = make_topology("ts600", SEED, N_HOSTS)
    (run_dir / "topology").mkdir(parents=True)
    topo.save(run_dir / "topology" / "topo-0.npz")
    rng = np.random.default_rng(7)
    groups = []
    for g, size in enumerate(GROUP_SIZES):
        nodes = rng.permutation(N_HOSTS)[: size + 1]
        rp, members = int(nodes[0]), nodes[1:].astype(int)
        # a random tree: each member hangs under the RP or an earlier member
        parents = [rp if i == 0 or rng.random() < 0.2 else int(members[rng.integers(i)])
                   for i in range(size)]
        edges = list(zip(parents, members.tolist(), strict=False))
        delay = {rp: 0}
        for p, c in edges:
            delay[c] = delay[p] + int(topo.latency(p, c)[()])
        groups.append({"group": g, "rp": rp, "members": members, "edges": edges,
                       "delay": delay})
    def i4(v):
        return pa.array(v, pa.int32())

    def i8(v):
        return pa.array(v, pa.int64())

    _write(run_dir, "host", "setup", {"node": i4(range(N_HOSTS)),
                                      "router": i4(topo.host_router.tolist()),
                                      "id_hex": pa.array([f"{i:032x}" for i in range(N_HOSTS)])})
    _write(run_dir, "group", "create", {
        "group": i4([d["group"] for d in groups]), "rank": i4([d["group"] + 1 for d in groups]),
        "size": i4(GROUP_SIZES), "rp": i4([d["rp"] for d in groups]),
        "creator": i4([d["rp"] for d in groups]), "id_hex": pa.array(["0" * 32] * len(groups))})
    _write(run_dir, "membership", "join", {
        "group": i4([d["group"] for d in groups for _ in d["members"]]),
        "member": i4([int(m) for d in groups for m in d["members"]])})
    edges = [(d["group"], p, c) for d in groups for p, c in d["edges"]]
    publish = 1_000_000
    _write(run_dir, "message", "multicast", {
        "time": i8([publish] * len(edges)), "arrival": i8([publish + 1] * len(edges)),
        "type": pa.array([68] * len(edges), pa.int16()), "src": i4([p for _, p, _ in edges]),
        "dst": i4([c for _, _, c in edges]), "group": i4([g for g, _, _ in edges])})
    # the type table a real run writes (emulator): the analysis resolves "scribe_data" here
    _write(run_dir, "message_type", "setup", {"type": pa.array([68], pa.int16()),
                                              "name": pa.array(["scribe_data"], pa.string())})
    _write(run_dir, "tree_edge", "multicast", {
        "group": i4([g for g, _, _ in edges]), "parent": i4([p for _, p, _ in edges]),
        "child": i4([c for _, _, c in edges]), "variant": pa.array(["scribe"] * len(edges))})
    rows = [(d["group"], d["rp"], int(m), d["delay"][int(m)]) for d in groups
            for m in d["members"]]
    _write(run_dir, "delivery", "multicast", {
        "group": i4([r[0] for r in rows]), "member": i4([r[2] for r in rows]),
        "source": i4([r[1] for r in rows]), "publish_time": i8([publish] * len(rows)),
        "time": i8([publish + r[3] for r in rows]),
        "hops": pa.array([1] * len(rows), pa.int16()), "seqno": i8([0] * len(rows)),
        "variant": pa.array(["scribe"] * len(rows))})
    return topo, groups, edges


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def real_run(spark, tmp_path_factory):
    from analysis import run_analysis

    run_dir = tmp_path_factory.mktemp("real") / "ts600-20250101"
    topo, groups, edges = build_run(run_dir)
    summary = run_analysis(run_dir, spark)    # default reader: topologies.load_topology
    links = {}
    for r in read_csv(run_dir / "metrics/link_stress.csv"):
        links.setdefault(r["traffic"], {})[int(r["link"])] = int(r["stress"])
    return run_dir, topo, groups, edges, summary, links


def test_default_reader_reads_saved_topology(tmp_path):
    topo = make_topology("ts600", SEED, 50)
    topo.save(tmp_path / "topo-0.npz")
    again = default_reader(tmp_path / "topo-0.npz")
    assert again.n_links == topo.n_links and again.has_paths
    assert np.array_equal(again.host_router, topo.host_router)
    matrix = Topology.from_latency_matrix(np.array([[0, 5000], [5000, 0]]), [0, 1, 1])
    matrix.save(tmp_path / "topo-1.npz")
    loaded = default_reader(tmp_path / "topo-1.npz")
    assert not loaded.has_paths
    with pytest.raises(ValueError, match="no physical paths"):
        core_pair_loads(loaded, np.array([0]), np.array([1]), np.array([1]))


def test_core_pair_loads_equal_path_links():
    topo = make_topology("ts600", SEED, N_HOSTS)
    rng = np.random.default_rng(3)
    a, b = rng.integers(N_HOSTS, size=(2, 500))
    loads = core_pair_loads(topo, topo.host_router[a], topo.host_router[b], np.ones(500))
    want = Counter(int(x) for s, d in zip(a, b, strict=False) for x in topo.path_links(s, d)
                   if x < lan_base(topo))
    assert {int(k): int(loads[k]) for k in np.flatnonzero(loads)} == dict(want)


def test_core_union_counts_equal_path_link_sets():
    # the compiled walk stops where a tree's earlier walk from the same source was: the
    # counts must still be one per tree per link of its union, with several sources per
    # tree, repeated pairs and same-router pairs mixed in
    topo = make_topology("ts600", SEED, N_HOSTS)
    rng = np.random.default_rng(4)
    tree = rng.integers(6, size=400)
    src = np.where(rng.random(400) < 0.8, topo.host_router[tree * 7],
                   topo.host_router[rng.integers(N_HOSTS, size=400)])
    dst = topo.host_router[rng.integers(N_HOSTS, size=400)]
    dst[:20] = src[:20]
    counts = core_union_counts(topo, tree, src, dst)
    unions = {}
    for t, s, d in zip(tree.tolist(), src.tolist(), dst.tolist(), strict=True):
        unions.setdefault(t, set()).update(int(x) for x in topo.route_links([s], [d])[1])
    want = Counter(x for links in unions.values() for x in links)
    assert {int(k): int(counts[k]) for k in np.flatnonzero(counts)} == dict(want)


@pytest.mark.slow
def test_scribe_link_stress_is_sum_of_path_links(real_run):
    _, topo, _, edges, summary, links = real_run
    same_router = [(p, c) for _, p, c in edges if topo.host_router[p] == topo.host_router[c]]
    assert same_router, "the random trees should contain a LAN-only hop"
    want = Counter(int(x) for _, p, c in edges for x in topo.path_links(p, c))
    assert links["scribe"] == dict(want)
    assert summary["link_stress"]["scribe"]["total"] == sum(
        len(topo.path_links(p, c)) for _, p, c in edges)
    assert summary["link_stress"]["scribe"]["links"] == topo.n_links


@pytest.mark.slow
def test_ip_multicast_and_unicast_equal_baselines(real_run):
    _, topo, groups, _, summary, links = real_run
    ip, uni, total_distinct = Counter(), Counter(), 0
    for d in groups:
        _, ids, ones = ip_multicast(topo, d["rp"], d["members"])
        ip.update(dict(zip(ids.tolist(), ones.tolist(), strict=False)))
        total_distinct += len(ids)   # distinct links of the source-rooted tree
        _, ids, loads = naive_unicast(topo, d["rp"], d["members"])
        uni.update(dict(zip(ids.tolist(), loads.tolist(), strict=False)))
    assert links["ip_multicast"] == dict(ip)
    assert summary["link_stress"]["ip_multicast"]["total"] == total_distinct
    assert links["naive_unicast"] == dict(uni)
    assert summary["link_stress"]["naive_unicast"]["max"] == max(uni.values())


@pytest.mark.slow
def test_delays_and_rdp_against_topology(real_run):
    run_dir, topo, groups, _, summary, _ = real_run
    rank1 = groups[0]
    rdp = {int(r["member"]): float(r["rdp"]) for r in read_csv(run_dir / "metrics/rdp_rank1.csv")}
    members = rank1["members"]
    ip = topo.latency(np.full(len(members), rank1["rp"]), members)
    want = {int(m): rank1["delay"][int(m)] / int(i) for m, i in zip(members, ip, strict=False)}
    assert rdp.keys() == want.keys()
    for m in want:
        assert rdp[m] == pytest.approx(want[m], rel=1e-12)
    assert summary["rdp_rank1"]["max"] == pytest.approx(max(want.values()))
    by_group = {int(r["group"]): r
                for r in read_csv(run_dir / "metrics/delay_penalty_by_group.csv")}
    for d in groups:
        ms = d["members"]
        ipd = topo.latency(np.full(len(ms), d["rp"]), ms)
        scribe = np.array([d["delay"][int(m)] for m in ms])
        assert float(by_group[d["group"]]["rad"]) == pytest.approx(scribe.mean() / ipd.mean())
        assert float(by_group[d["group"]]["rmd"]) == pytest.approx(scribe.max() / ipd.max())
