"""Event logs -> Spark DataFrames: Parquet read by the executors, Parquet handed over by the
driver, or Arrow object refs.

Every returned DataFrame has the columns of `analysis.schema.EVENT_TABLES[table]` (cast to
the documented types) plus `topo` (int). A table with no rows (absent directory, no refs) is
an empty DataFrame with that schema, so metric code never special-cases missing logs.

Schemas are declared, not inferred: the driver reads one Parquet footer per table (pyarrow,
no Spark job) and, when its types are the documented ones (the engine's files), Spark reads
with the declared schema; other files (hand-written logs) are read with Spark's inference
and cast. `hand_over=True` (a cluster whose executors do not see the driver's disk): the
driver reads the Parquet itself and sends it to Spark as Arrow batches inside the tasks.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis.schema import ARROW_TYPES, EVENT_TABLES, table_ddl


class EventLogError(ValueError):
    """An event log does not follow the documented schema."""


def empty_table(spark: SparkSession, table: str) -> DataFrame:
    """An empty DataFrame with the documented schema of `table` (plus topo)."""
    return spark.createDataFrame([], table_ddl(table))


def conform(df: DataFrame, table: str) -> DataFrame:
    """Select and cast the documented columns of `table`; raise EventLogError on a missing one.

    O(1) driver work (a projection); `phase` may be absent in hand-made logs and then is null.
    """
    columns = {**EVENT_TABLES[table], "topo": "int"}
    present = set(df.columns)
    missing = [c for c in columns if c not in present and c != "phase"]
    if missing:
        raise EventLogError(f"event table '{table}' lacks column(s) {', '.join(missing)}")
    return df.select([
        (F.col(f"`{c}`") if c in present else F.lit(None)).cast(t).alias(c)
        for c, t in columns.items()
    ])


def parquet_files(run_dir: str | Path, table: str) -> list[Path]:
    """RUN_DIR/events/<table>/topo=<t>/*.parquet, sorted."""
    path = Path(run_dir) / "events" / table
    return sorted(path.glob("topo=*/*.parquet")) if path.is_dir() else []


def logged_topologies(run_dir: str | Path, table: str) -> set[int]:
    """Topology indices with a topo=<t> directory holding Parquet files for `table`."""
    return {int(p.parent.name.split("=", 1)[1]) for p in parquet_files(run_dir, table)}


def _declared_types_match(sample: Path, table: str) -> bool:
    schema = pq.read_schema(sample)
    names = set(schema.names)
    for c, t in EVENT_TABLES[table].items():
        if c not in names:
            if c == "phase":
                return False
            raise EventLogError(f"event table '{table}' lacks column(s) {c}")
        if str(schema.field(c).type) != ARROW_TYPES[t]:
            return False
    return True


def load_parquet(spark: SparkSession, run_dir: str | Path, table: str,
                 hand_over: bool = False) -> DataFrame:
    """RUN_DIR/events/<table>/ (hive partition column `topo`) as a conformed DataFrame."""
    files = parquet_files(run_dir, table)
    if not files:
        return empty_table(spark, table)
    path = Path(run_dir) / "events" / table
    if hand_over:
        return _handed_over(spark, path, table)
    if _declared_types_match(files[0], table):
        return (spark.read.schema(table_ddl(table)).option("basePath", str(path))
                .parquet(str(path)))
    df = spark.read.option("basePath", str(path)).parquet(str(path))
    return conform(df, table)


def _handed_over(spark: SparkSession, path: Path, table: str) -> DataFrame:
    """The driver reads the table (pyarrow) and hands it to Spark as Arrow record batches
    (createDataFrame with Arrow: the data travels inside the tasks, no shared disk)."""
    columns = {**EVENT_TABLES[table], "topo": "int"}
    ds = pads.dataset(str(path), format="parquet", partitioning="hive")
    present = set(ds.schema.names)
    missing = [c for c in columns if c not in present and c != "phase"]
    if missing:
        raise EventLogError(f"event table '{table}' lacks column(s) {', '.join(missing)}")
    tbl = ds.to_table(columns=[c for c in columns if c in present])
    arrays = {}
    for c, t in columns.items():
        target = pa.type_for_alias(ARROW_TYPES[t])
        arrays[c] = (tbl[c].cast(target) if c in present
                     else pa.nulls(tbl.num_rows, target))
    return spark.createDataFrame(pa.table(arrays).to_pandas(), table_ddl(table))


def load_refs(spark: SparkSession, refs: list, table: str) -> DataFrame:
    """Convert object refs of pyarrow Tables (emu.logs(table)) to a conformed DataFrame.

    The data goes Ray object store -> Ray Dataset -> Spark through RayDP, without Parquet.
    """
    if not refs:
        return empty_table(spark, table)
    import ray.data

    return conform(ray.data.from_arrow_refs(list(refs)).to_spark(spark), table)


def load_events(spark: SparkSession, run_dir: str | Path | None = None,
                refs: dict[str, list] | None = None,
                hand_over: bool = False) -> dict[str, DataFrame]:
    """All event tables, each from `refs[table]` when given there, else from the Parquet logs.

    Returns {table: DataFrame} for every table of the schema (empty ones included).
    """
    if run_dir is None and refs is None:
        raise ValueError("load_events needs a run directory or object refs")
    refs = refs or {}
    unknown = sorted(set(refs) - set(EVENT_TABLES))
    if unknown:
        raise EventLogError(f"unknown event table(s) in refs: {', '.join(unknown)}")
    tables = {}
    for table in EVENT_TABLES:
        if table in refs:
            tables[table] = load_refs(spark, refs[table], table)
        elif run_dir is not None:
            tables[table] = load_parquet(spark, run_dir, table, hand_over)
        else:
            tables[table] = empty_table(spark, table)
    return tables
