"""The analysis gives the same bytes whatever the Spark partitioning and the row order.

One run on a real ts600 topology (tests/test_analysis_real.py's random trees) is analysed
twice on the shared Spark session: as written, with 1 shuffle partition and executors
reading the run directory; and with every event table's rows shuffled over 3 files per
table, 7 shuffle partitions and the driver handing the logs and topology files to the
executors (the cluster path, `shared_storage=False`). Every CSV and every summary figure
must be byte-identical.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from analysis import AnalysisOptions, run_analysis
from test_analysis_real import build_run


def shuffle_logs(src, dst, seed: int = 5, parts: int = 3) -> None:
    """Copy run directory `src` to `dst` with each event table's rows permuted and split
    over `parts` Parquet files."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("metrics", "figures",
                                                            "summary.json"))
    rng = np.random.default_rng(seed)
    for table_dir in (dst / "events").iterdir():
        for topo_dir in table_dir.iterdir():
            files = sorted(topo_dir.glob("*.parquet"))
            # the files as the emulator writes them: `topo` only in the directory name
            table = pq.read_table(files, partitioning=None)
            for f in files:
                f.unlink()
            table = table.take(rng.permutation(table.num_rows))
            bounds = np.linspace(0, table.num_rows, parts + 1).astype(int)
            for k in range(parts):
                pq.write_table(table.slice(bounds[k], bounds[k + 1] - bounds[k]),
                               topo_dir / f"part{k}.parquet")


def _analyse(spark, run_dir, partitions: int, options: AnalysisOptions) -> dict:
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    try:
        summary = run_analysis(run_dir, spark, options=options)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    summary.pop("timing")
    return summary


@pytest.mark.slow
def test_same_results_for_any_partitioning_and_row_order(spark, tmp_path):
    first = tmp_path / "ts600-a"
    build_run(first)
    second = tmp_path / "ts600-b"
    shuffle_logs(first, second)
    a = _analyse(spark, first, 1, AnalysisOptions())
    b = _analyse(spark, second, 7, AnalysisOptions(shared_storage=False))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    names = sorted(p.name for p in (first / "metrics").glob("*.csv"))
    assert len(names) == 15
    for name in names:
        one = (first / "metrics" / name).read_bytes()
        if not name.startswith("overlay_hops"):   # the run logs no routes
            assert one.count(b"\n") > 1, f"{name} has no data rows"
        assert one == (second / "metrics" / name).read_bytes(), name


@pytest.mark.slow
def test_placement_deals_keys_to_partitions_in_turn(spark):
    """Grouping by (slot, *keys) after `placed` sends the i-th key to shuffle partition
    i mod n: Spark's shuffle is pmod(hash(slot, *keys), n), and our Murmur3 is Spark's."""
    from pyspark.sql import functions as F

    from analysis.placement import SLOT, placed, spark_int_hash

    values = [*range(-40, 40), 2**31 - 1, -2**31, 123456789]
    hashed = (spark.createDataFrame([(v,) for v in values], "v int")
              .select("v", F.hash("v").alias("h")).collect())
    assert {r.v: r.h for r in hashed} == {v: spark_int_hash(v) for v in values}
    rows = spark.range(0, 3000).selectExpr("cast(id % 3 as int) as topo",
                                           "cast(id % 5 as int) as traffic")
    keys = [(t, c) for t in range(3) for c in range(5)]
    got = (placed(rows, ["topo", "traffic"], keys, 4)
           .groupBy(SLOT, "topo", "traffic").count()
           .withColumn("part", F.pmod(F.hash(SLOT, "topo", "traffic"), F.lit(4))).collect())
    assert len(got) == len(keys)       # every key's rows with one slot
    assert {(r.topo, r.traffic): r.part for r in got} == {k: i % 4 for i, k in enumerate(keys)}
    with pytest.raises(ValueError, match="not int"):
        placed(rows.selectExpr("cast(topo as bigint) as topo"), ["topo"], [(0,)], 2)
