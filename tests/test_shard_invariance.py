"""Results do not depend on how the nodes are split over shards: the real Pastry + Scribe
stack on the real engine.

The session's reference run (tests/runs.py: the `quick` scenario with the protocol
bootstrap, so Pastry's join protocol, Scribe's joins, multicasts and the tree collapse all
run) end to end -- emulation, Spark analysis, summary -- on 1 shard is compared with the
same run on 2 shards (the reference): the event logs row for row, every CSV byte for byte,
and every summary.json figure to the last bit (what ../shared/tools/same-results compares:
timing, shard counts, run and engine statistics aside). On 2 shards with the random
partition and on 8 (locality) the emulation alone must write the 1-shard logs row for
row: the analysis of equal logs gives the same results however the rows are split into
files and ordered (tests/test_analysis_partitions.py), and 1 against 2 shards checks that
end to end. 3 shards on the 3 nodes of a local Ray cluster: tests/test_cluster_event_logs.py.

All runs share the session's Ray and Spark.
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


def test_two_shards_give_every_csv_and_figure_of_one(one_shard, reference_runs):
    two = reference_runs[2]
    assert log_differences(two, one_shard) == []
    assert csv_differences(two, one_shard) == []
    mine = summary(two)
    assert mine["shards"] == 2                       # really run on that many shards
    assert figure_differences(mine, summary(one_shard)) == []


# each partition at least once, and a shard count beyond the cores (3 shards run on the
# cluster of tests/test_cluster_event_logs.py; 3 with the random partition, many small
# windows on two cores, costs three times 2)
@pytest.mark.parametrize("shards, partition", [(2, "random"), (8, "locality")])
def test_other_splits_write_the_one_shard_logs(one_shard, tmp_path, monkeypatch, shards,
                                               partition):
    monkeypatch.setattr(runner_mod, "_analyse", lambda *a, **k: {})
    monkeypatch.setattr(runner_mod, "_record_total", lambda *a, **k: None)
    out = run_scenario(reference_config(shards, partition=partition),
                       out=tmp_path / f"k{shards}-{partition}", progress=False)
    assert log_differences(out, one_shard) == []
    files = (out / "events" / "message" / "topo=0").glob("join-shard*.parquet")
    assert len(list(files)) == shards                # really run on that many shards
