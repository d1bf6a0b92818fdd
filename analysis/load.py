"""Event logs -> Spark DataFrames, from Parquet in a run directory or from Arrow object refs.

Every returned DataFrame has the columns of `analysis.schema.EVENT_TABLES[table]` (cast to
the documented types) plus `topo` (int). A table with no rows (absent directory, no refs) is
an empty DataFrame with that schema, so metric code never special-cases missing logs.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis.schema import EVENT_TABLES


class EventLogError(ValueError):
    """An event log does not follow the documented schema."""


def empty_table(spark: SparkSession, table: str) -> DataFrame:
    """An empty DataFrame with the documented schema of `table` (plus topo)."""
    ddl = ", ".join(f"`{c}` {t}" for c, t in {**EVENT_TABLES[table], "topo": "int"}.items())
    return spark.createDataFrame([], ddl)


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


def load_parquet(spark: SparkSession, run_dir: str | Path, table: str) -> DataFrame:
    """Read RUN_DIR/events/<table>/ (hive partition column `topo`) as a conformed DataFrame."""
    path = Path(run_dir) / "events" / table
    if not path.is_dir() or not any(path.rglob("*.parquet")):
        return empty_table(spark, table)
    df = spark.read.option("basePath", str(path)).parquet(str(path))
    return conform(df, table)


def load_refs(spark: SparkSession, refs: list, table: str) -> DataFrame:
    """Convert object refs of pyarrow Tables (emu.logs(table)) to a conformed DataFrame.

    The data goes Ray object store -> Ray Dataset -> Spark through RayDP, without Parquet.
    """
    if not refs:
        return empty_table(spark, table)
    import ray.data

    return conform(ray.data.from_arrow_refs(list(refs)).to_spark(spark), table)


def load_events(spark: SparkSession, run_dir: str | Path | None = None,
                refs: dict[str, list] | None = None) -> dict[str, DataFrame]:
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
            tables[table] = load_parquet(spark, run_dir, table)
        else:
            tables[table] = empty_table(spark, table)
    return tables
