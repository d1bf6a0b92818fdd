"""The test session's reference run and the comparisons of whole runs.

`reference_config(K)` is the small scenario every end-to-end test compares against: the
`quick` scenario (ts600) with 200 nodes and 6 groups on an overlay built by Pastry's join
protocol, so that the join, Scribe's joins, multicasts and the tree collapse all run.
tests/conftest.py's `reference_runs` runs it once per session on 2 shards and on 1 (the
twin), with its Spark analysis; tests read those run directories and never change them
(a test that needs to change one copies it first).

The comparisons are exact: the product promises the same results to the last bit for any
shard count, partition, fault replayed or resumed run (what ../shared/tools/same-results compares:
timing, shard counts, run and engine statistics aside).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REFERENCE_NODES, REFERENCE_GROUPS = 200, 6

# ../shared/tools/same-results' rule: what may differ between two runs of the same scenario
NOT_RESULTS = {"timing", "shards", "run", "emulation"}


def reference_config(shards: int = 2, *sets: str, partition: str = "locality"):
    """The reference scenario on `shards` shards, with `sets` (``section.key=value``)."""
    from scenarios import load_scenario
    return load_scenario("quick", nodes=REFERENCE_NODES, groups=REFERENCE_GROUPS,
                         shards=shards, bootstrap="protocol",
                         sets=[f"topology.partition={partition}", *sets])


def reference_cli_args(shards: int = 2) -> list[str]:
    """`cli.py scenario ...` arguments of the same run."""
    return ["scenario", "quick", "--nodes", str(REFERENCE_NODES), "--groups",
            str(REFERENCE_GROUPS), "--shards", str(shards), "--bootstrap", "protocol"]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


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
    """The event tables that differ between runs `a` and `b` (row for row, every column)."""
    ta, tb = event_tables(a), event_tables(b)
    assert ta["message"].num_rows > 5_000          # the protocol bootstrap really ran
    if set(ta) != set(tb):
        return [f"tables differ: {sorted(set(ta) ^ set(tb))}"]
    return [name for name in ta if not ta[name].equals(tb[name])]


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
    """The metrics CSVs that differ, byte for byte, between `run_dir` and `ref`."""
    names = sorted(p.relative_to(ref).as_posix() for p in ref.rglob("*.csv"))
    mine = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*.csv"))
    if not names or names != mine:
        return [f"CSV files differ: {sorted(set(names) ^ set(mine))}"]
    return [n for n in names if (run_dir / n).read_bytes() != (ref / n).read_bytes()]


def result_differences(run_dir: Path, ref: Path) -> list[str]:
    """Everything a run's results hold that differs from `ref`'s: the event logs, every
    CSV and every summary figure."""
    return (log_differences(run_dir, ref) + csv_differences(run_dir, ref)
            + figure_differences(summary(run_dir), summary(ref)))


def emulated_copy(ref: Path, dst: Path) -> Path:
    """A copy of run `ref` as it stood when its emulation ended: every phase completed and
    its event logs written, no analysis yet (resuming it runs the analysis alone)."""
    shutil.copytree(ref, dst, ignore=shutil.ignore_patterns(
        "metrics", "figures", "summary.json", "report.*", "COMPLETE"))
    return dst
