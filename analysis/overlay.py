"""Overlay figures: hops per Pastry route, messages by type, bottleneck-remover probes, groups."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis.schema import type_name


def _type_names(spark: SparkSession, names: dict[int, str] | None) -> DataFrame:
    """Small (type, type_name) table covering every code a smallint log column can use here."""
    rows = [(code, type_name(code, names)) for code in range(256)]
    return spark.createDataFrame(rows, "type smallint, type_name string")


def overlay_hops_histogram(route: DataFrame) -> DataFrame:
    """Routes per hop count. Schema: topo int, phase string, type smallint, hops smallint,
    routes bigint."""
    return route.groupBy("topo", "phase", "type", "hops").agg(F.count("*").alias("routes"))


def overlay_hops_summary(route: DataFrame, names: dict[int, str] | None = None) -> DataFrame:
    """Per (topo, phase, type) of routed message: routes, mean/max hops, mean overlay delay.

    Schema: topo int, phase string, type smallint, type_name string, routes bigint,
    mean_hops double, max_hops smallint, mean_path_us double.
    """
    per_type = route.groupBy("topo", "phase", "type").agg(
        F.count("*").alias("routes"), F.avg("hops").alias("mean_hops"),
        F.max("hops").alias("max_hops"), F.avg("path_us").alias("mean_path_us"))
    return (per_type.join(F.broadcast(_type_names(route.sparkSession, names)), "type", "left")
            .select("topo", "phase", "type", "type_name", "routes", "mean_hops", "max_hops",
                    "mean_path_us"))


def messages_by_type(message: DataFrame, names: dict[int, str] | None = None) -> DataFrame:
    """Overlay hops (message rows) per (topo, phase, type).

    Schema: topo int, phase string, type smallint, type_name string, messages bigint.
    """
    counts = message.groupBy("topo", "phase", "type").agg(F.count("*").alias("messages"))
    return (counts.join(F.broadcast(_type_names(message.sparkSession, names)), "type", "left")
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
