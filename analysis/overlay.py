"""Overlay figures: hops per Pastry route, messages by type, bottleneck-remover probes, groups."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from analysis.schema import TYPE_NAMES, TYPE_RANGES


def _fallback_name(code: Column, names: dict[int, str] | None) -> Column:
    """Name from the static tables (options first), else from the code range of the type."""
    table = {**TYPE_NAMES, **(names or {})}
    mapping = F.create_map(*[F.lit(x) for k, v in sorted(table.items())
                             for x in (k, v)])
    by_range = F.concat(F.lit("type_"), code.cast("string"))
    for low, high, prefix in reversed(TYPE_RANGES):
        by_range = F.when(code.between(low, high),
                          F.concat(F.lit(f"{prefix}_"), code.cast("string"))).otherwise(by_range)
    return F.coalesce(mapping[code.cast("int")], by_range)


def with_type_names(counts: DataFrame, message_type: DataFrame | None,
                    names: dict[int, str] | None = None) -> DataFrame:
    """Add `type_name` to a frame with a `type` column.

    The run's own `message_type` table (written by the engine from each protocol's
    TYPE_NAMES) wins; codes it does not name fall back to `names`, then to the static copy
    in analysis.schema, then to the code range ("pastry_24", "type_201").
    """
    out = counts
    if message_type is not None:
        logged = (message_type.where(F.col("name").isNotNull())
                  .groupBy("type").agg(F.min("name").alias("logged_name")))
        out = out.join(F.broadcast(logged), "type", "left")
    else:
        out = out.withColumn("logged_name", F.lit(None).cast("string"))
    return (out.withColumn("type_name", F.coalesce(F.col("logged_name"),
                                                   _fallback_name(F.col("type"), names)))
            .drop("logged_name"))


def overlay_hops_histogram(route: DataFrame) -> DataFrame:
    """Routes per hop count. Schema: topo int, phase string, type smallint, hops smallint,
    routes bigint."""
    return route.groupBy("topo", "phase", "type", "hops").agg(F.count("*").alias("routes"))


def overlay_hops_summary(route: DataFrame, names: dict[int, str] | None = None,
                         message_type: DataFrame | None = None) -> DataFrame:
    """Per (topo, phase, type) of routed message: routes, mean/max hops, mean overlay delay.

    Schema: topo int, phase string, type smallint, type_name string, routes bigint,
    mean_hops double, max_hops smallint, mean_path_us double.
    """
    per_type = route.groupBy("topo", "phase", "type").agg(
        F.count("*").alias("routes"), F.avg("hops").alias("mean_hops"),
        F.max("hops").alias("max_hops"), F.avg("path_us").alias("mean_path_us"))
    return (with_type_names(per_type, message_type, names)
            .select("topo", "phase", "type", "type_name", "routes", "mean_hops", "max_hops",
                    "mean_path_us"))


def messages_by_type(message: DataFrame, names: dict[int, str] | None = None,
                     message_type: DataFrame | None = None) -> DataFrame:
    """Overlay hops (message rows) per (topo, phase, type).

    Schema: topo int, phase string, type smallint, type_name string, messages bigint.
    """
    counts = message.groupBy("topo", "phase", "type").agg(F.count("*").alias("messages"))
    return (with_type_names(counts, message_type, names)
            .select("topo", "phase", "type", "type_name", "messages"))


def probes_per_join(probe: DataFrame, membership: DataFrame) -> DataFrame:
    """Bottleneck-remover probes against the joins requested (membership rows), per topology.

    Schema: topo int, probes bigint, nodes_probing bigint, joins bigint, probes_per_join double.
    """
    probes = probe.groupBy("topo").agg(F.count("*").alias("probes"),
                                       F.countDistinct("node").alias("nodes_probing"))
    joins = membership.groupBy("topo").agg(F.count("*").alias("joins"))
    return (joins.join(probes, "topo", "left").fillna(0, ["probes", "nodes_probing"])
            .withColumn("probes_per_join", F.col("probes") / F.col("joins"))
            .select("topo", "probes", "nodes_probing", "joins", "probes_per_join"))


def group_sizes(groups: DataFrame, membership: DataFrame) -> DataFrame:
    """Per group: rank, intended size, RP and the members asked to join.

    Schema: topo int, group int, rank int, size int, rp int, members bigint.
    """
    members = membership.groupBy("topo", "group").agg(F.countDistinct("member").alias("members"))
    attrs = groups.groupBy("topo", "group").agg(F.min("rank").alias("rank"),
                                                F.max("size").alias("size"),
                                                F.min("rp").alias("rp"))
    return (attrs.join(members, ["topo", "group"], "left").fillna(0, ["members"])
            .select("topo", "group", "rank", "size", "rp", "members"))
