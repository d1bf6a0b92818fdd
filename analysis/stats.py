"""Distribution statistics as Spark aggregations, and the average over topologies.

Percentiles are exact (Spark's `percentile`, linear interpolation like numpy's default).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def distribution_aggs(value: str, prefix: str, percentiles: dict[str, float] | None = None,
                      ) -> list[Column]:
    """Aggregations mean/median/max (+ named percentiles) of column `value`,
    named `<prefix>_<stat>`."""
    col = F.col(value)
    aggs = [F.avg(col).alias(f"{prefix}_mean"),
            F.percentile(col, 0.5).alias(f"{prefix}_median"),
            F.max(col).cast("double").alias(f"{prefix}_max")]
    for name, q in (percentiles or {}).items():
        aggs.append(F.percentile(col, q).alias(f"{prefix}_{name}"))
    return aggs


def with_topology_mean(summary: DataFrame, keys: list[str]) -> DataFrame:
    """Per-topology summary rows plus one row per `keys` with topo = "mean".

    The mean row averages every numeric column over the topologies (the published results
    average 10 topologies). The `topo` column becomes a string ("0", "1", ..., "mean").
    """
    numeric = [f.name for f in summary.schema.fields
               if f.name not in keys and f.name != "topo"
               and f.dataType.typeName() in ("double", "float", "long", "integer", "short")]
    others = [c for c in summary.columns if c not in keys and c != "topo" and c not in numeric]
    per_topo = summary.withColumn("topo", F.col("topo").cast("string"))
    mean = (summary.groupBy(*keys)
            .agg(*[F.avg(c).alias(c) for c in numeric], *[F.first(c).alias(c) for c in others])
            .withColumn("topo", F.lit("mean")))
    ordered = ["topo", *keys, *[c for c in summary.columns if c not in keys and c != "topo"]]
    return per_topo.select(ordered).unionByName(mean.select(ordered))
