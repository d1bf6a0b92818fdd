"""Results do not depend on how the nodes are split over shards (issue 18, item 4).

A small `quick` scenario with the protocol bootstrap (so Pastry's join protocol, Scribe's
joins, multicasts and the tree collapse all run) is run end to end -- emulation, Spark
analysis, summary -- on 1 shard, and again on 2, 3 and 8 shards with both
`topology.partition` values (locality at 2 and 8, random at 3). Every CSV must
equal the 1-shard run's byte for byte, and every summary.json figure to the last bit
(what `same-results` compares: timing, shard counts, run and engine statistics aside).
The event logs themselves are compared row for row across shard counts in
test_scale_out.py; this test covers what the analysis makes of logs split over other
numbers of files and partitions.

All runs share the module's Ray and Spark session. Slow: ~10-15 s a run on a quiet 2-core
machine.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from scenarios import load_scenario, run_scenario

pytestmark = pytest.mark.slow

NODES, GROUPS = 200, 6

# same-results' rule: what may differ between two runs of the same scenario
NOT_RESULTS = {"timing", "shards", "run", "emulation"}


def run(tmp_path: Path, shards: int, partition: str) -> Path:
    cfg = load_scenario("quick", nodes=NODES, groups=GROUPS, shards=shards,
                        bootstrap="protocol", sets=[f"topology.partition={partition}"])
    return run_scenario(cfg, out=tmp_path / f"k{shards}-{partition}", progress=False)


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
    assert csv_differences(out, one_shard) == []
    ref = json.loads((one_shard / "summary.json").read_text())
    mine = json.loads((out / "summary.json").read_text())
    assert mine["shards"] == shards                  # really run on that many shards
    assert figure_differences(mine, ref) == []
