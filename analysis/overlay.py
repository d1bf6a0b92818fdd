"""Overlay figures: hops per Pastry route, messages by type, bottleneck-remover probes, groups.

Spark aggregates the logs into small tables (routes per (topo, phase, type, hops) with
their path delay sums; hops per (topo, phase, type); probes; group attributes); the driver
derives the CSVs and the summary figures from those with exact integer sums.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.schema import type_name


def route_counts(route: DataFrame) -> DataFrame:
    """(topo, phase, type, hops, routes, path_us_sum): everything the route figures need."""
    return route.groupBy("topo", "phase", "type", "hops").agg(
        F.count("*").alias("routes"), F.sum("path_us").alias("path_us_sum"),
        F.count("path_us").alias("path_us_n"))


def message_counts(message: DataFrame) -> DataFrame:
    """Overlay hops (message rows) per (topo, phase, type)."""
    return message.groupBy("topo", "phase", "type").agg(F.count("*").alias("messages"))


def probe_counts(probe: DataFrame, membership: DataFrame) -> DataFrame:
    """(topo, probes, nodes_probing, joins) per topology with memberships."""
    probes = probe.groupBy("topo").agg(F.count("*").alias("probes"),
                                       F.countDistinct("node").alias("nodes_probing"))
    joins = membership.groupBy("topo").agg(F.count("*").alias("joins"))
    return (joins.join(probes, "topo", "left").fillna(0, ["probes", "nodes_probing"])
            .select("topo", "probes", "nodes_probing", "joins"))


def group_table(groups: DataFrame, membership: DataFrame) -> DataFrame:
    """Per group: rank, intended size, RP and the members asked to join."""
    members = membership.groupBy("topo", "group").agg(F.countDistinct("member").alias("members"))
    attrs = groups.groupBy("topo", "group").agg(F.min("rank").alias("rank"),
                                                F.max("size").alias("size"),
                                                F.min("rp").alias("rp"))
    return (attrs.join(members, ["topo", "group"], "left").fillna(0, ["members"])
            .select("topo", "group", "rank", "size", "rp", "members"))


def type_names_of(codes, logged: dict[int, str], names: dict[int, str] | None) -> list[str]:
    """Readable names: the run's `message_type` table first (`RunProtocol.names`), then
    `names` (the caller's), then the code range ("pastry_24")."""
    return [logged.get(int(c)) or type_name(int(c), names) for c in codes]


def overlay_hops_histogram(routes: pd.DataFrame) -> pd.DataFrame:
    """overlay_hops.csv: topo, phase, type, hops, routes."""
    return routes[["topo", "phase", "type", "hops", "routes"]].astype(
        {"topo": "int64", "type": "int64", "hops": "int64", "routes": "int64"})


def overlay_hops_summary(routes: pd.DataFrame, logged: dict[int, str],
                         names: dict[int, str] | None) -> pd.DataFrame:
    """Per (topo, phase, type): routes, mean/max hops, mean overlay delay (exact sums)."""
    rows = []
    for (t, phase, code), part in routes.groupby(["topo", "phase", "type"], sort=True,
                                                 dropna=False):
        n = int(part["routes"].sum())
        hops = part["hops"].to_numpy(np.int64)
        n_path = int(part["path_us_n"].sum())
        rows.append({"topo": int(t), "phase": phase, "type": int(code), "routes": n,
                     "mean_hops": float(int((hops * part["routes"].to_numpy(np.int64)).sum()))
                     / n, "max_hops": int(hops.max()),
                     "mean_path_us": float(int(part["path_us_sum"].fillna(0).sum())) / n_path
                     if n_path else None})
    out = pd.DataFrame(rows, columns=["topo", "phase", "type", "routes", "mean_hops",
                                      "max_hops", "mean_path_us"])
    out.insert(3, "type_name", type_names_of(out["type"], logged, names))
    return out


def messages_by_type(counts: pd.DataFrame, logged: dict[int, str],
                     names: dict[int, str] | None) -> pd.DataFrame:
    """messages_by_type.csv: topo, phase, type, type_name, messages."""
    out = counts[["topo", "phase", "type"]].astype({"topo": "int64", "type": "int64"})
    out["type_name"] = type_names_of(out["type"], logged, names)
    out["messages"] = counts["messages"].astype("int64").to_numpy()
    return out


def probes_per_join(probes: pd.DataFrame) -> pd.DataFrame:
    """probes.csv: topo, probes, nodes_probing, joins, probes_per_join."""
    out = probes.astype({"topo": "int64", "probes": "int64", "nodes_probing": "int64",
                         "joins": "int64"}).copy()
    out["probes_per_join"] = (out["probes"] / out["joins"].where(out["joins"] != 0)).astype(
        "float64")
    return out[["topo", "probes", "nodes_probing", "joins", "probes_per_join"]]


def route_means(routes: pd.DataFrame, create_code: int | None) -> pd.DataFrame:
    """Per topology: mean_hops_all, routes, mean_hops (routes of type `create_code`, Scribe's
    CREATE: routed to a random key, so their hops are a full Pastry route), full_routes."""
    rows = []
    for t, part in routes.groupby("topo", sort=True):
        n = part["routes"].to_numpy(np.int64)
        hops = part["hops"].to_numpy(np.int64)
        full = (part["type"] == create_code).to_numpy() if create_code is not None \
            else np.zeros(len(part), dtype=bool)
        n_full = int(n[full].sum())
        rows.append({"topo": int(t), "mean_hops_all": float(int((hops * n).sum())) / n.sum(),
                     "routes": int(n.sum()),
                     "mean_hops": float(int((hops[full] * n[full]).sum())) / n_full
                     if n_full else None, "full_routes": n_full})
    return pd.DataFrame(rows, columns=["topo", "mean_hops_all", "routes", "mean_hops",
                                       "full_routes"])
