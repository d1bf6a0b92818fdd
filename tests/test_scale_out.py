"""Scale-out: the real Pastry + Scribe stack on 1, 3 and 8 shards (and on a 3-node Ray
cluster) writes the same event logs, row for row; per-shard window bounds are safe.

The emulation is what is under test here, so these runs stop before the Spark analysis
(which reads only the event logs compared below; test_scenario_quick covers it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from emulator.driver import reach_matrix, window_ends
from emulator.queue import NEVER
from scenarios import load_scenario, run_scenario
from scenarios import runner as runner_mod

NODES, GROUPS = 400, 12


def _config(shards: int, partition: str = "locality"):
    cfg = load_scenario("quick", nodes=NODES, groups=GROUPS, shards=shards,
                        bootstrap="protocol")
    cfg.topology["partition"] = partition
    return cfg


def _emulate(cfg, out: Path, monkeypatch, address=None) -> Path:
    monkeypatch.setattr(runner_mod, "_analyse", lambda *a, **k: {})
    monkeypatch.setattr(runner_mod, "_record_total", lambda *a, **k: None)  # no summary.json
    return run_scenario(cfg, out=out, progress=False, address=address)


def _event_tables(run_dir: Path) -> dict[str, pa.Table]:
    """Every event table of a run (RUN_DIR, or the run.storage root it named), its rows
    sorted by every column (files are per shard)."""
    out = {}
    for table_dir in sorted((run_dir / "events").iterdir()):
        files = sorted(table_dir.rglob("*.parquet"))
        tbl = pa.concat_tables([pq.ParquetFile(f).read() for f in files])
        if "phase" in tbl.column_names and table_dir.name == "message_type":
            continue  # written once per topology by the driver: no shard in it
        keys = [(c, "ascending") for c in tbl.column_names]
        out[table_dir.name] = tbl.sort_by(keys)
    return out


def _assert_same_logs(a: Path, b: Path) -> None:
    ta, tb = _event_tables(a), _event_tables(b)
    assert set(ta) == set(tb)
    assert ta["message"].num_rows > 10_000   # the protocol bootstrap really ran
    for name in ta:
        assert ta[name].equals(tb[name]), f"table {name} differs"


@pytest.fixture(scope="module")
def ray_local():
    from emulator.runtime import start_ray, stop_ray
    start_ray(num_cpus=2)
    yield
    stop_ray()


@pytest.fixture(scope="module")
def one_shard(ray_local, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        return _emulate(_config(1), tmp_path_factory.mktemp("k1") / "run", mp)
    finally:
        mp.undo()


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


def test_a_shard_alone_with_events_is_bounded_by_its_round_trip():
    # shard 0 busy at 0, shard 1 idle: 0's message reaches 1 at >= 5d and the reply can be
    # back at 0 at 5d + 7d, so 0 may not run past 12d (the one-hop bound would be the cap)
    d = 1_000
    look = np.array([[NEVER, 5 * d], [7 * d, NEVER]], np.int64)
    reach = reach_matrix(look)
    assert reach.tolist() == [[12 * d, 5 * d], [7 * d, 12 * d]]
    ends = window_ends(np.array([0, NEVER], np.int64), reach, d, 10 ** 9, NEVER)
    assert ends.tolist() == [12 * d, 5 * d]


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


# ---- the real stack on the real engine ----------------------------------------------------
@pytest.mark.slow
# K = 1 (the reference), 3 and 8, both partitions once (tests/test_shard_invariance.py runs
# K = 2, 3, 8 end to end through the analysis; CI's budget has no room for the cross product)
@pytest.mark.parametrize("shards,partition", [(8, "locality"), (3, "random")])
def test_real_stack_same_logs_for_any_shard_count(one_shard, tmp_path, monkeypatch,
                                                  shards, partition):
    run = _emulate(_config(shards, partition), tmp_path / "run", monkeypatch)
    _assert_same_logs(one_shard, run)


@pytest.mark.slow
def test_three_node_cluster_gives_the_one_shard_logs(one_shard, tmp_path, monkeypatch):
    """Three shards spread over the three nodes of a local Ray cluster (no driver hub: they
    push batches to each other) write exactly the one-shard logs."""
    import ray
    from ray.cluster_utils import Cluster

    from emulator.runtime import stop_ray
    stop_ray()
    cluster = Cluster()
    try:
        for n in range(3):
            cluster.add_node(num_cpus=1, resources={f"node{n}": 1})
        seen = []
        import emulator

        class NodeRecorder(emulator.Emulator):   # one shard per node; notes where they ran
            def __init__(self, *args, **kwargs):
                kwargs["actor_options"] = [{"resources": {f"node{k}": 0.01}} for k in range(3)]
                super().__init__(*args, **kwargs)

            def shutdown(self):
                seen.append(set(ray.get([a.node_id.remote() for a in self._actors])))
                super().shutdown()
        monkeypatch.setattr(emulator, "Emulator", NodeRecorder)
        # the nodes share this disk: a named run.storage, where every shard writes its logs
        # (without one a multi-node run hands them to Spark: test_cluster_event_logs.py)
        cfg = _config(3)
        cfg.run["storage"] = str(tmp_path / "storage")
        run = _emulate(cfg, tmp_path / "run", monkeypatch, address=cluster.address)
        assert not (run / "events").exists()
        _assert_same_logs(one_shard, tmp_path / "storage")
        assert seen and len(seen[0]) == 3, f"shards ran on {seen} nodes"
    finally:
        stop_ray()
        cluster.shutdown()


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
    assert auto(2, 3_000) == 1            # churn: a small overlay runs whole
    assert auto(2, 10_000) == 1 and auto(2, 19_999) == 1 and auto(2, 20_000) == 2
    assert auto(2, 50_000) == 2           # small_groups_30k: one per CPU
    assert auto(64, 1_000_000) == 64 and auto(256, 1_000_000) == 100
    assert auto(8, 5) == 1 and auto(0, 100_000) == 1
