"""Link stress per directed physical link (SPEC section 6).

Packets per directed link when one message is multicast to every group:
- Scribe (per traffic selection, see `analysis.schema.Traffic`): every selected overlay hop
  src -> dst loads the uplink of src, the core route router(src) -> router(dst), and the
  downlink of dst. Hops are aggregated by (source router, destination router) in Spark
  before a mapInPandas stage expands each pair once into core links.
- IP multicast: per group, the union of the unicast routes from the source (the group's RP)
  to each member (membership table); each link of the union carries one copy.
- Naive unicast: one unicast copy from the source to each member.
Topologies without physical paths (`has_paths` False) get no link rows; their summary rows
have null figures and a note.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.physical import by_topology, core_pair_loads, core_union_counts, load_topology
from analysis.schema import Traffic

NO_PATHS_NOTE = "not available: the topology has no physical paths (latency matrix only)"


def _nonzero_frame(topo: int, traffic: str, loads: np.ndarray) -> pd.DataFrame:
    links = np.flatnonzero(loads)
    return pd.DataFrame({"topo": np.full(len(links), topo, dtype=np.int32),
                         "traffic": traffic, "link": links.astype(np.int64),
                         "stress": loads[links].astype(np.int64)})


def expand_router_pairs(pairs: DataFrame, run_dir: str | Path, reader=None) -> DataFrame:
    """(topo, traffic, src_router, dst_router, count) -> core (topo, traffic, link, stress).

    Rows of one (topo, traffic) may be spread over batches: the caller sums by link.
    One vectorized `route_links` call per (batch, topo, traffic) in the workers.
    """
    run_dir = str(run_dir)

    def expand(batches):
        for pdf in batches:
            for (t, traffic), part in pdf.groupby(["topo", "traffic"], sort=True):
                loads = core_pair_loads(load_topology(run_dir, int(t), reader),
                                        part["src_router"].to_numpy(),
                                        part["dst_router"].to_numpy(), part["count"].to_numpy())
                yield _nonzero_frame(int(t), traffic, loads)

    return by_topology(pairs).mapInPandas(
        expand, "topo int, traffic string, link bigint, stress bigint")


def expand_group_unions(trees: DataFrame, run_dir: str | Path, reader=None) -> DataFrame:
    """(topo, group, src_router, dst_routers array) -> core (topo, traffic, link, stress).

    One row per group, so each group's union of routes is taken whole inside one batch;
    stress counts groups. All (group, destination router) pairs of a batch are expanded by
    one `route_links` call.
    """
    run_dir = str(run_dir)

    def expand(batches):
        for pdf in batches:
            for t, part in pdf.groupby("topo", sort=True):
                dsts = part["dst_routers"].to_numpy()
                lengths = np.fromiter((len(d) for d in dsts), np.int64, count=len(dsts))
                flat = (np.concatenate([np.asarray(d, np.int64) for d in dsts])
                        if lengths.sum() else np.zeros(0, np.int64))
                tree = np.repeat(np.arange(len(part), dtype=np.int64), lengths)
                src = np.repeat(part["src_router"].to_numpy(np.int64), lengths)
                loads = core_union_counts(load_topology(run_dir, int(t), reader),
                                          tree, src, flat)
                yield _nonzero_frame(int(t), "ip_multicast", loads)

    return by_topology(trees).mapInPandas(
        expand, "topo int, traffic string, link bigint, stress bigint")


def overlay_hops(message: DataFrame, traffic: tuple[Traffic, ...]) -> DataFrame:
    """Selected overlay hops as (topo, traffic, src, dst)."""
    selections = [message.where(F.col("phase").isin(list(t.phases))
                                & F.col("type").isin(list(t.types)))
                  .select("topo", F.lit(t.label).alias("traffic"), "src", "dst")
                  for t in traffic]
    out = selections[0]
    for s in selections[1:]:
        out = out.union(s)
    return out


def multicast_pairs(membership: DataFrame, groups: DataFrame) -> DataFrame:
    """(topo, group, source, member): each member of each group, source = the group's RP.

    The source itself is left out (no packet leaves the host for it).
    """
    rp = groups.groupBy("topo", "group").agg(F.min("rp").alias("source"))
    return (membership.select("topo", "group", "member").distinct()
            .join(rp, ["topo", "group"])
            .where(F.col("member") != F.col("source"))
            .select("topo", "group", "source", "member"))


def _lan_loads(hops: DataFrame, meta: DataFrame) -> DataFrame:
    up = hops.groupBy("topo", "traffic", F.col("src").alias("host")).agg(
        F.count("*").alias("stress")).withColumn("down", F.lit(0))
    down = hops.groupBy("topo", "traffic", F.col("dst").alias("host")).agg(
        F.count("*").alias("stress")).withColumn("down", F.lit(1))
    return (up.union(down).join(meta.select("topo", "lan_base"), "topo")
            .select("topo", "traffic",
                    (F.col("lan_base") + 2 * F.col("host") + F.col("down")).alias("link"),
                    "stress"))


def _ip_lan_loads(members: DataFrame, meta: DataFrame) -> DataFrame:
    """IP multicast LAN loads: the source's uplink once per group, each member's downlink."""
    up = (members.select("topo", "group", F.col("source").alias("host")).distinct()
          .withColumn("down", F.lit(0)))
    down = members.select("topo", "group", F.col("member").alias("host")).withColumn(
        "down", F.lit(1))
    return (up.union(down).groupBy("topo", "host", "down").agg(F.count("*").alias("stress"))
            .join(meta.select("topo", "lan_base"), "topo")
            .select("topo", F.lit("ip_multicast").alias("traffic"),
                    (F.col("lan_base") + 2 * F.col("host") + F.col("down")).alias("link"),
                    "stress"))


def _with_routers(pairs: DataFrame, host: DataFrame, src: str, dst: str) -> DataFrame:
    # one row per node (100,000 at paper scale, ~1 MB): broadcast it rather than shuffle
    # the million hop rows twice
    routers = F.broadcast(host.select("topo", "node", "router").distinct())
    return (pairs
            .join(routers.withColumnRenamed("node", src).withColumnRenamed("router", "src_router"),
                  ["topo", src])
            .join(routers.withColumnRenamed("node", dst).withColumnRenamed("router", "dst_router"),
                  ["topo", dst]))


def link_stress(message: DataFrame, membership: DataFrame, groups: DataFrame, host: DataFrame,
                meta: DataFrame, traffic: tuple[Traffic, ...], run_dir: str | Path,
                reader=None) -> DataFrame:
    """Non-zero stress per (topo, traffic, directed link).

    `meta`: (topo int, n_links bigint, lan_base bigint, has_paths boolean), one row per
    topology. `traffic` labels: the Scribe selections, plus ip_multicast and naive_unicast.
    Schema: topo int, traffic string, link bigint, kind string (core|lan_up|lan_down),
    stress bigint.
    """
    with_paths = meta.where(F.col("has_paths")).select("topo", "lan_base")
    members = multicast_pairs(membership, groups).join(with_paths.select("topo"), "topo")

    # Scribe hops and naive unicast copies are both "packets between two hosts"
    hops = (overlay_hops(message, traffic).join(with_paths.select("topo"), "topo")
            .union(members.select("topo", F.lit("naive_unicast").alias("traffic"),
                                  F.col("source").alias("src"), F.col("member").alias("dst"))))
    router_pairs = (_with_routers(hops, host, "src", "dst")
                    .where(F.col("src_router") != F.col("dst_router"))
                    .groupBy("topo", "traffic", "src_router", "dst_router")
                    .agg(F.count("*").alias("count")))
    core = expand_router_pairs(router_pairs, run_dir, reader)

    ip_lan = _ip_lan_loads(members, with_paths)
    ip_trees = (_with_routers(members, host, "source", "member")
                .where(F.col("src_router") != F.col("dst_router"))
                .groupBy("topo", "group", "src_router")
                .agg(F.collect_set("dst_router").alias("dst_routers")))
    ip_core = expand_group_unions(ip_trees, run_dir, reader)

    loads = (core.unionByName(_lan_loads(hops, with_paths)).unionByName(ip_core)
             .unionByName(ip_lan)
             .groupBy("topo", "traffic", "link").agg(F.sum("stress").alias("stress")))
    return (loads.join(with_paths, "topo")
            .withColumn("kind", F.when(F.col("link") < F.col("lan_base"), "core")
                        .when((F.col("link") - F.col("lan_base")) % 2 == 0, "lan_up")
                        .otherwise("lan_down"))
            .select("topo", "traffic", "link", "kind", F.col("stress").cast("bigint")))


def link_stress_summary(stress: DataFrame, meta: DataFrame, message: DataFrame,
                        traffic: tuple[Traffic, ...]) -> DataFrame:
    """Per (topo, traffic): total packets, mean/median/max over links with non-zero stress,
    links (all directed links of the topology), links_nonzero, mean_all_links (total/links),
    note; plus the mean row over topologies.

    Topologies without paths get one row per traffic with null figures and NO_PATHS_NOTE.
    Schema: topo string, traffic string, total, mean, median, max, links, links_nonzero,
    mean_all_links (double; null when not available), note string.
    """
    from analysis.stats import with_topology_mean

    figures = (stress.groupBy("topo", "traffic")
               .agg(F.sum("stress").cast("double").alias("total"),
                    F.avg("stress").alias("mean"),
                    F.percentile("stress", 0.5).alias("median"),
                    F.max("stress").cast("double").alias("max"),
                    F.count("*").cast("double").alias("links_nonzero"))
               .join(meta.select("topo", F.col("n_links").cast("double").alias("links")), "topo")
               .withColumn("mean_all_links", F.col("total") / F.col("links"))
               .withColumn("note", F.lit(None).cast("string")))
    no_paths = meta.where(~F.col("has_paths")).select("topo")
    labels = (overlay_hops(message, traffic).select("topo", "traffic").distinct()
              .join(no_paths, "topo")
              .unionByName(no_paths.crossJoin(
                  stress.sparkSession.createDataFrame(
                      [("ip_multicast",), ("naive_unicast",)], "traffic string")))
              .distinct())
    missing = labels
    for c in ["total", "mean", "median", "max", "links_nonzero", "links", "mean_all_links"]:
        missing = missing.withColumn(c, F.lit(None).cast("double"))
    missing = missing.withColumn("note", F.lit(NO_PATHS_NOTE))
    cols = ["topo", "traffic", "total", "mean", "median", "max", "links", "links_nonzero",
            "mean_all_links", "note"]
    return with_topology_mean(figures.select(cols).unionByName(missing.select(cols)), ["traffic"])


def link_stress_histogram(stress: DataFrame) -> DataFrame:
    """Number of directed links per non-zero stress value.

    Schema: topo int, traffic string, stress bigint, links bigint.
    """
    return stress.groupBy("topo", "traffic", "stress").agg(F.count("*").alias("links"))
