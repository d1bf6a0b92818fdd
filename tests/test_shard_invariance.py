"""Results do not depend on how the nodes are split over shards (issue 18 item 4, issue 15
item 6): the real Pastry + Scribe stack on the real engine.

A small `quick` scenario with the protocol bootstrap (so Pastry's join protocol, Scribe's
joins, multicasts and the tree collapse all run) is run end to end -- emulation, Spark
analysis, summary -- on 1 shard, and again on 2, 3 and 8 shards with both
`topology.partition` values (locality at 2 and 8, random at 3). Each run's event logs must
equal the 1-shard run's row for row, every CSV byte for byte, and every summary.json figure
to the last bit (what `same-results` compares: timing, shard counts, run and engine
statistics aside). Last, 3 shards on the 3 nodes of a local Ray cluster (no driver hub:
they push batches to each other) write the 1-shard logs exactly.

All runs but the cluster's share the module's Ray and Spark session. Slow: ~10-15 s a run
on a quiet 2-core machine.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scenarios import load_scenario, run_scenario
from scenarios import runner as runner_mod

pytestmark = pytest.mark.slow

NODES, GROUPS = 200, 6

# same-results' rule: what may differ between two runs of the same scenario
NOT_RESULTS = {"timing", "shards", "run", "emulation"}


def config(shards: int, partition: str = "locality"):
    return load_scenario("quick", nodes=NODES, groups=GROUPS, shards=shards,
                         bootstrap="protocol", sets=[f"topology.partition={partition}"])


def run(tmp_path: Path, shards: int, partition: str) -> Path:
    return run_scenario(config(shards, partition), out=tmp_path / f"k{shards}-{partition}",
                        progress=False)


def event_tables(run_dir: Path) -> dict[str, pa.Table]:
    """Every event table of a run (RUN_DIR, or the run.storage root it named), its rows
    sorted by every column (files are per shard)."""
    out = {}
    for table_dir in sorted((run_dir / "events").iterdir()):
        if table_dir.name == "message_type":
            continue  # written once per topology by the driver: no shard in it
        tbl = pa.concat_tables([pq.ParquetFile(f).read()
                                for f in sorted(table_dir.rglob("*.parquet"))])
        out[table_dir.name] = tbl.sort_by([(c, "ascending") for c in tbl.column_names])
    return out


def log_differences(a: Path, b: Path) -> list[str]:
    ta, tb = event_tables(a), event_tables(b)
    assert ta["message"].num_rows > 5_000          # the protocol bootstrap really ran
    if set(ta) != set(tb):
        return [f"tables differ: {sorted(set(ta) ^ set(tb))}"]
    return [name for name in ta if not ta[name].equals(tb[name])]


@pytest.fixture(scope="module")
def one_shard(session, tmp_path_factory) -> Path:
    return run(tmp_path_factory.mktemp("k1"), 1, "locality")


def figure_differences(a, b, path: str = "") -> list[str]:
    """Every figure that differs between summaries `a` and `b` (exact comparison)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if not path and k in NOT_RESULTS:
                continue
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in one")
            else:
                out += figure_differences(a[k], b[k], f"{path}/{k}")
        return out
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def csv_differences(run_dir: Path, ref: Path) -> list[str]:
    names = sorted(p.relative_to(ref).as_posix() for p in ref.rglob("*.csv"))
    mine = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*.csv"))
    if names != mine:
        return [f"CSV files differ: {sorted(set(names) ^ set(mine))}"]
    return [n for n in names if (run_dir / n).read_bytes() != (ref / n).read_bytes()]


def test_the_comparisons_see_a_difference(one_shard, tmp_path):
    """The two checks below would catch a last-bit change (they are not vacuous)."""
    summary = json.loads((one_shard / "summary.json").read_text())
    changed = json.loads(json.dumps(summary))
    rmd = changed["delay_penalty"]["rmd"]
    rmd["mean"] = math.nextafter(rmd["mean"], math.inf)     # one unit in the last place
    assert figure_differences(summary, changed)
    assert not figure_differences(summary, {**summary, "timing": {}, "shards": 99})
    assert len(list(one_shard.rglob("*.csv"))) >= 10


# every shard count once and each partition at least once (the whole cross product would
# add three runs, ~60 s, to CI's budget for no case these do not cover)
@pytest.mark.parametrize("shards, partition", [
    (2, "locality"), (3, "random"), (8, "locality")])
def test_every_csv_and_figure_is_identical(one_shard, tmp_path, shards, partition):
    out = run(tmp_path, shards, partition)
    assert log_differences(out, one_shard) == []
    assert csv_differences(out, one_shard) == []
    ref = json.loads((one_shard / "summary.json").read_text())
    mine = json.loads((out / "summary.json").read_text())
    assert mine["shards"] == shards                  # really run on that many shards
    assert figure_differences(mine, ref) == []


def test_three_node_cluster_gives_the_one_shard_logs(one_shard, tmp_path, monkeypatch):
    """Three shards, one on each node of a local Ray cluster, write exactly the one-shard
    logs. Emulation only (the analysis of the same logs is checked above); last in the
    module, since it stops the module's Ray and Spark."""
    import ray
    from ray.cluster_utils import Cluster

    import emulator
    from emulator.runtime import stop_ray
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
        cfg = config(3)
        cfg.run["storage"] = str(tmp_path / "storage")
        out = run_scenario(cfg, out=tmp_path / "run", progress=False, address=cluster.address)
        assert not (out / "events").exists()
        assert log_differences(tmp_path / "storage", one_shard) == []
        assert seen and len(seen[0]) == 3, f"shards ran on {seen} nodes"
    finally:
        stop_ray()
        cluster.shutdown()
