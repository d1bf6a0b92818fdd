"""Results do not depend on how the nodes are split over shards: the real Pastry + Scribe
stack on the real engine.

The session's reference run (tests/runs.py: the `quick` scenario with the protocol
bootstrap, so Pastry's join protocol, Scribe's joins, multicasts and the tree collapse all
run) end to end -- emulation, Spark analysis, summary -- on 1 shard is compared with the
same run on 2 shards (the reference), 3 (random partition) and 8 (locality). Each run's
event logs must equal the 1-shard run's row for row, every CSV byte for byte, and every
summary.json figure to the last bit (what ../shared/tools/same-results compares: timing,
shard counts, run and engine statistics aside). Last, 3 shards on the 3 nodes of a local Ray cluster
(no driver hub: they push batches to each other) write the 1-shard logs exactly.

All runs but the cluster's share the session's Ray and Spark.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from runs import (
    csv_differences,
    figure_differences,
    log_differences,
    reference_config,
    summary,
)

from scenarios import run_scenario
from scenarios import runner as runner_mod

pytestmark = pytest.mark.slow


@pytest.fixture
def one_shard(reference_runs) -> Path:
    return reference_runs[1]


def test_the_comparisons_see_a_difference(one_shard, tmp_path):
    """The two checks below would catch a last-bit change (they are not vacuous)."""
    ref = summary(one_shard)
    changed = json.loads(json.dumps(ref))
    rmd = changed["delay_penalty"]["rmd"]
    rmd["mean"] = math.nextafter(rmd["mean"], math.inf)     # one unit in the last place
    assert figure_differences(ref, changed)
    assert not figure_differences(ref, {**ref, "timing": {}, "shards": 99})
    assert len(list(one_shard.rglob("*.csv"))) >= 10


# every shard count once and each partition at least once (the whole cross product would
# add runs to CI's budget for no case these do not cover)
@pytest.mark.parametrize("shards, partition", [
    (2, "locality"), (3, "random"), (8, "locality")])
def test_every_csv_and_figure_is_identical(one_shard, reference_runs, tmp_path, shards,
                                           partition):
    if (shards, partition) == (2, "locality"):
        out = reference_runs[2]
    else:
        out = run_scenario(reference_config(shards, partition=partition),
                           out=tmp_path / f"k{shards}-{partition}", progress=False)
    assert log_differences(out, one_shard) == []
    assert csv_differences(out, one_shard) == []
    mine = summary(out)
    assert mine["shards"] == shards                  # really run on that many shards
    assert figure_differences(mine, summary(one_shard)) == []


@pytest.mark.owns_runtime
def test_three_node_cluster_gives_the_one_shard_logs(one_shard, tmp_path, monkeypatch):
    """Three shards, one on each node of a local Ray cluster, write exactly the one-shard
    logs. Emulation only (the analysis of the same logs is checked above). It stops the
    session's Ray and Spark: marked owns_runtime, it runs after every test sharing them."""
    import ray
    from ray.cluster_utils import Cluster

    import emulator
    from runtime.ray_spark import stop_ray
    stop_ray()
    cluster = Cluster()
    try:
        for n in range(3):
            cluster.add_node(num_cpus=1, resources={f"node{n}": 1})
        seen = []

        class NodeRecorder(emulator.Emulator):   # one shard per node; notes where they ran
            def __init__(self, *args, **kwargs):
                kwargs["actor_options"] = [{"resources": {f"node{k}": 0.01}} for k in range(3)]
                super().__init__(*args, **kwargs)

            def shutdown(self):
                seen.append(set(ray.get([a.node_id.remote() for a in self._actors])))
                super().shutdown()
        monkeypatch.setattr(emulator, "Emulator", NodeRecorder)
        monkeypatch.setattr(runner_mod, "_analyse", lambda *a, **k: {})
        monkeypatch.setattr(runner_mod, "_record_total", lambda *a, **k: None)
        # the nodes share this disk: a named run.storage, where every shard writes its logs
        # (without one a multi-node run hands them to Spark: test_cluster_event_logs.py)
        cfg = reference_config(3)
        cfg.run["storage"] = str(tmp_path / "storage")
        out = run_scenario(cfg, out=tmp_path / "run", progress=False, address=cluster.address)
        assert not (out / "events").exists()
        assert log_differences(tmp_path / "storage", one_shard) == []
        assert seen and len(seen[0]) == 3, f"shards ran on {seen} nodes"
    finally:
        stop_ray()
        cluster.shutdown()
