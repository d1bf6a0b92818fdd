"""Node stress per tree variant (SPEC section 6), from the `tree_edge` snapshots.

Per node: the number of non-empty children tables (groups where it is a parent) and the
total number of children-table entries. Every node of the run counts (the `host` table
lists all N nodes), so nodes with no children have zeros. Edges repeated in several
snapshots (phases) are counted once.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.stats import distribution_aggs, with_topology_mean


def all_nodes(host: DataFrame, tree_edge: DataFrame, membership: DataFrame) -> DataFrame:
    """(topo, node) of every node: from the host table, else every node id seen in the logs."""
    nodes = host.select("topo", "node")
    seen = (tree_edge.select("topo", F.col("parent").alias("node"))
            .union(tree_edge.select("topo", F.col("child").alias("node")))
            .union(membership.select("topo", F.col("member").alias("node"))))
    with_hosts = nodes.select("topo").distinct()
    # topologies without a host table fall back to the nodes seen
    fallback = seen.join(with_hosts, "topo", "left_anti")
    return nodes.union(fallback).distinct()


def node_stress(tree_edge: DataFrame, nodes: DataFrame) -> DataFrame:
    """Per (topo, variant, node): children_tables, children_entries (bigint, zeros included).

    Schema: topo int, variant string, node int, children_tables bigint, children_entries bigint.
    """
    edges = tree_edge.select("topo", "variant", "group", "parent", "child").distinct()
    per_parent = (edges.groupBy("topo", "variant", F.col("parent").alias("node"))
                  .agg(F.countDistinct("group").alias("children_tables"),
                       F.count("*").alias("children_entries")))
    variants = edges.select("topo", "variant").distinct()
    return (nodes.join(variants, "topo")
            .join(per_parent, ["topo", "variant", "node"], "left")
            .fillna(0, ["children_tables", "children_entries"])
            .select("topo", "variant", "node", "children_tables", "children_entries"))


def node_stress_summary(stress: DataFrame) -> DataFrame:
    """Mean/median/max of both counts over all nodes and over tree nodes, plus the mean row.

    population "all_nodes": every node (zeros included; summary.json uses this one, as the
    paper's per-node figures do); "tree_nodes": nodes with at least one non-empty children
    table (the forwarders). Schema: topo string, variant string, population string,
    nodes bigint, tables_mean, tables_median, tables_max, entries_mean, entries_median,
    entries_max (double).
    """
    def describe(df: DataFrame, population: str) -> DataFrame:
        return (df.groupBy("topo", "variant")
                .agg(F.count("*").alias("nodes"),
                     *distribution_aggs("children_tables", "tables"),
                     *distribution_aggs("children_entries", "entries"))
                .withColumn("population", F.lit(population)))

    both = describe(stress, "all_nodes").unionByName(
        describe(stress.where(F.col("children_tables") > 0), "tree_nodes"))
    cols = ["topo", "variant", "population", "nodes", "tables_mean", "tables_median",
            "tables_max", "entries_mean", "entries_median", "entries_max"]
    return with_topology_mean(both.select(cols), ["variant", "population"])


def node_stress_histogram(stress: DataFrame) -> DataFrame:
    """Number of nodes per value of each count (all nodes, zeros included).

    Schema: topo int, variant string, measure string (children_tables|children_entries),
    value bigint, nodes bigint.
    """
    tables = stress.select("topo", "variant", F.lit("children_tables").alias("measure"),
                           F.col("children_tables").alias("value"))
    entries = stress.select("topo", "variant", F.lit("children_entries").alias("measure"),
                            F.col("children_entries").alias("value"))
    return (tables.union(entries).groupBy("topo", "variant", "measure", "value")
            .agg(F.count("*").alias("nodes")))
