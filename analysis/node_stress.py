"""Node stress per tree variant (SPEC section 6), from the `tree_edge` snapshots.

Per node: the number of non-empty children tables (groups where it is a parent) and the
total number of children-table entries. Every node of the run counts (the `host` table
lists all N nodes; a topology without host rows falls back to every node id seen in its
tree edges and memberships), so nodes with no children have zeros. Edges repeated in
several snapshots (phases) are counted once.

Spark: tree edges and node ids are cogrouped by topology; one numpy call per topology
counts every variant's edges. The driver collects the per-node rows (node_stress.csv) and
computes the summary and histogram from them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.stats import distribution, unique_rows, with_topology_mean

STRESS_SCHEMA = ("topo int, variant string, node int, children_tables bigint, "
                 "children_entries bigint")
_COLUMNS = [c.split()[0] for c in STRESS_SCHEMA.split(", ")]


def node_stress_rows(tree_edge: DataFrame, host: DataFrame, membership: DataFrame,
                     ) -> DataFrame:
    """Per (topo, variant, node): children_tables, children_entries (zeros included)."""
    edges = tree_edge.select("topo", "variant", "group", "parent", "child")
    # members matter only where a topology has no host rows: only those travel (the paper
    # run's 4 M membership rows were most of what this job shuffled besides the edges)
    hostless = membership.join(F.broadcast(host.select("topo").distinct()), "topo",
                               "left_anti")
    nodes = (host.select("topo", "node", F.lit(True).alias("is_host"))
             .unionByName(hostless.select("topo", F.col("member").alias("node"),
                                          F.lit(False).alias("is_host"))))
    return (edges.groupBy("topo").cogroup(nodes.groupBy("topo"))
            .applyInPandas(count_children, STRESS_SCHEMA))


def count_children(edges: pd.DataFrame, nodes: pd.DataFrame) -> pd.DataFrame:
    """numpy kernel: every variant's per-node counts for the edges of one topology."""
    if not len(edges):
        return pd.DataFrame(columns=_COLUMNS)
    t = int(edges["topo"].iat[0])
    hosts = nodes["node"].to_numpy(np.int64)[nodes["is_host"].to_numpy(bool)]
    if len(hosts):
        all_nodes = np.unique(hosts)
    else:   # no host table for this topology: every node seen in its logs
        all_nodes = np.unique(np.concatenate([
            edges["parent"].to_numpy(np.int64), edges["child"].to_numpy(np.int64),
            nodes["node"].to_numpy(np.int64)]))
    out = []
    for variant, part in edges.groupby("variant", sort=True):
        group = part["group"].to_numpy(np.int64)
        parent = part["parent"].to_numpy(np.int64)
        _, entry_parent, _ = unique_rows(group, parent, part["child"].to_numpy(np.int64))
        _, table_parent = unique_rows(group, parent)        # distinct (group, parent)
        out.append(pd.DataFrame({
            "topo": t, "variant": variant, "node": all_nodes,
            "children_tables": _count_at(all_nodes, table_parent),
            "children_entries": _count_at(all_nodes, entry_parent)}))
    return pd.concat(out, ignore_index=True)[_COLUMNS]


def _count_at(nodes: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Occurrences of each of the sorted `nodes` in `ids` (ids not in `nodes` are dropped,
    as the join with the node list dropped them)."""
    pos = np.searchsorted(nodes, ids)
    found = pos < len(nodes)
    found[found] = nodes[pos[found]] == ids[found]
    return np.bincount(pos[found], minlength=len(nodes)).astype(np.int64)


def node_stress_summary(stress: pd.DataFrame) -> pd.DataFrame:
    """Mean/median/max of both counts over all nodes and over tree nodes, plus the mean row.

    population "all_nodes": every node (zeros included; summary.json uses this one, as the
    paper's per-node figures do); "tree_nodes": nodes with at least one non-empty children
    table (the forwarders). Columns: topo string, variant string, population string,
    nodes, tables_mean, tables_median, tables_max, entries_mean, entries_median,
    entries_max (double).
    """
    rows = []
    for (t, v), part in stress.groupby(["topo", "variant"], sort=True):
        tables = part["children_tables"].to_numpy(np.int64)
        entries = part["children_entries"].to_numpy(np.int64)
        tree = tables > 0
        for population, sel in (("all_nodes", slice(None)), ("tree_nodes", tree)):
            if population == "tree_nodes" and not tree.any():
                continue
            rows.append({"topo": t, "variant": v, "population": population,
                         "nodes": len(tables[sel]),
                         **distribution(tables[sel], "tables"),
                         **distribution(entries[sel], "entries")})
    cols = ["topo", "variant", "population", "nodes", "tables_mean", "tables_median",
            "tables_max", "entries_mean", "entries_median", "entries_max"]
    return with_topology_mean(pd.DataFrame(rows, columns=cols), ["variant", "population"],
                              cols[3:])


def node_stress_histogram(stress: pd.DataFrame) -> pd.DataFrame:
    """Number of nodes per value of each count (all nodes, zeros included).

    Columns: topo int, variant string, measure string (children_tables|children_entries),
    value bigint, nodes bigint.
    """
    parts = []
    for measure in ("children_tables", "children_entries"):
        counts = (stress.groupby(["topo", "variant", measure], sort=True).size()
                  .reset_index(name="nodes").rename(columns={measure: "value"}))
        counts.insert(2, "measure", measure)
        parts.append(counts)
    out = pd.concat(parts, ignore_index=True)
    return out.astype({"topo": "int64", "value": "int64", "nodes": "int64"})
