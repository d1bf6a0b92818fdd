"""Node stress per tree variant (SPEC section 6), from the `tree_edge` snapshots.

Per node: the number of non-empty children tables (groups where it is a parent) and the
total number of children-table entries. Every node of the run counts (the `host` table
lists all N nodes; a topology without host rows falls back to every node id seen in its
tree edges and memberships), so nodes with no children have zeros. Edges repeated in
several snapshots (phases) are counted once.

Spark: two grouped maps. Tree edges are grouped by (topology, group bucket) (bucket = group
mod `buckets`, so the edges of one group meet in one call and a cluster's cores share a
topology's groups); each call counts, in numpy, every variant's distinct edges per parent
(`parent_counts`). Those per-bucket counts, one row per node seen, are cogrouped by topology
with its node list, where one call adds up the buckets and puts in the zeros (`fill_nodes`).
The driver collects the per-node rows (node_stress.csv) and computes the summary and
histogram from them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.placement import SLOT, placed
from analysis.stats import distribution, sorted_unique, unique_rows, with_topology_mean
from analysis.variants import variant_codes, variant_columns

STRESS_SCHEMA = ("topo int, variant string, node int, children_tables bigint, "
                 "children_entries bigint")
_COLUMNS = [c.split()[0] for c in STRESS_SCHEMA.split(", ")]


def node_stress_rows(tree_edge: DataFrame, host: DataFrame, membership: DataFrame,
                     topologies: list[int], buckets: int, partitions: int) -> DataFrame:
    """Per (topo, variant, node): children_tables, children_entries (zeros included).
    The keys, (topology, bucket) then topology, are dealt out to the `partitions` in turn
    (`analysis.placement`)."""
    buckets = max(1, buckets)
    edges = (tree_edge.select("topo", *variant_columns(F.col("variant")), "group", "parent",
                              "child")
             .withColumn("bucket", F.pmod(F.col("group"), F.lit(buckets))))
    edges = placed(edges, ["topo", "bucket"],
                   [(t, b) for t in topologies for b in range(buckets)], partitions)
    partial = (edges.groupBy(SLOT, "topo", "bucket")
               .applyInPandas(lambda pdf: parent_counts(pdf.drop(columns=[SLOT, "bucket"])),
                              STRESS_SCHEMA))
    # members matter only where a topology has no host rows: only those travel (the paper
    # run's 4 M membership rows were most of what this job shuffled besides the edges)
    hostless = membership.join(F.broadcast(host.select("topo").distinct()), "topo",
                               "left_anti")
    nodes = (host.select("topo", "node", F.lit(True).alias("is_host"))
             .unionByName(hostless.select("topo", F.col("member").alias("node"),
                                          F.lit(False).alias("is_host"))))
    per_topology = [(t,) for t in topologies]
    return (placed(partial, ["topo"], per_topology, partitions).groupBy(SLOT, "topo")
            .cogroup(placed(nodes, ["topo"], per_topology, partitions).groupBy(SLOT, "topo"))
            .applyInPandas(fill_nodes, STRESS_SCHEMA))


def parent_counts(edges: pd.DataFrame) -> pd.DataFrame:
    """numpy kernel, O(n log n): per variant, the tables and entries of every parent among
    `edges` (topo, group, parent, child and the variant, as names or as `analysis.variants`
    codes; whole groups of one topology), distinct edges counted once; every child that is
    no parent here gets a row of zeros (a topology without host rows counts the nodes its
    edges name)."""
    if not len(edges):
        return pd.DataFrame(columns=_COLUMNS)
    t = int(edges["topo"].iat[0])
    codes, names = variant_codes(edges)
    keep = codes >= 0          # an edge without a variant counts nowhere
    v, group, parent, child = unique_rows(codes[keep], edges["group"].to_numpy(np.int64)[keep],
                                          edges["parent"].to_numpy(np.int64)[keep],
                                          edges["child"].to_numpy(np.int64)[keep])
    # distinct (variant, group, parent): the rows are sorted, so tables start where one ends
    table = np.r_[True, (v[1:] != v[:-1]) | (group[1:] != group[:-1])
                  | (parent[1:] != parent[:-1])]
    pv, pnode, entries = _counts(v, parent)
    _, _, tables = _counts(v[table], parent[table])
    cv, cnode, _ = _counts(v, child)
    leaf = ~np.isin(_pair(cv, cnode), _pair(pv, pnode))
    return pd.DataFrame({
        "topo": t, "variant": names[np.r_[pv, cv[leaf]]],
        "node": np.r_[pnode, cnode[leaf]], "children_tables": np.r_[tables, 0 * cv[leaf]],
        "children_entries": np.r_[entries, 0 * cv[leaf]]}, columns=_COLUMNS)


def _counts(v: np.ndarray, node: np.ndarray):
    """Distinct (v, node) pairs, sorted, and how often each occurs."""
    key, n = sorted_unique(_pair(v, node), return_counts=True)
    return key >> 32, key & 0xFFFFFFFF, n


def _pair(v: np.ndarray, node: np.ndarray) -> np.ndarray:
    # node ids are int32 in the logs (STRESS_SCHEMA), variant codes are few
    return (np.asarray(v, np.int64) << 32) | np.asarray(node, np.int64)


def fill_nodes(counts: pd.DataFrame, nodes: pd.DataFrame) -> pd.DataFrame:
    """numpy kernel: one topology's per-bucket counts added up over every node it has
    (the host list; without one, every node its edges and memberships name)."""
    if not len(counts):
        return pd.DataFrame(columns=_COLUMNS)
    t = int(counts["topo"].iat[0])
    node = counts["node"].to_numpy(np.int64)
    hosts = nodes["node"].to_numpy(np.int64)[nodes["is_host"].to_numpy(bool)]
    if len(hosts):
        all_nodes = np.unique(hosts)
    else:   # no host table for this topology: every node seen in its logs
        all_nodes = np.unique(np.concatenate([node, nodes["node"].to_numpy(np.int64)]))
    tables = counts["children_tables"].to_numpy(np.int64)
    entries = counts["children_entries"].to_numpy(np.int64)
    variant = counts["variant"].to_numpy(object)
    out = []
    for name in sorted(set(variant.tolist())):
        sel = variant == name
        out.append(pd.DataFrame({
            "topo": t, "variant": name, "node": all_nodes,
            "children_tables": _count_at(all_nodes, node[sel], tables[sel]),
            "children_entries": _count_at(all_nodes, node[sel], entries[sel])}))
    return pd.concat(out, ignore_index=True)[_COLUMNS]


def _count_at(nodes: np.ndarray, ids: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Sum of `weights` at each of the sorted `nodes` over `ids` (ids not in `nodes` are
    dropped, as the join with the node list dropped them)."""
    pos = np.searchsorted(nodes, ids)
    found = pos < len(nodes)
    found[found] = nodes[pos[found]] == ids[found]
    return np.bincount(pos[found], weights[found], minlength=len(nodes)).astype(np.int64)


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
