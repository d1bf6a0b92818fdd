"""Delay penalty of Scribe relative to IP multicast (SPEC section 6).

Scribe delay of a member = delivery.time - delivery.publish_time (from the multicast at the
source, the RP in the experiments, to delivery). IP-multicast delay = unicast latency
source -> member, `topo.latency(source, member)`, computed in Spark by a mapInPandas stage
that loads RUN_DIR/topology/topo-<t>.npz in the worker (vectorized per Arrow batch).
The source itself (member == source) is left out: both delays are 0 there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.physical import by_topology, load_topology
from analysis.stats import distribution_aggs, with_topology_mean


def ip_latency_table(pairs: DataFrame, run_dir: str | Path, reader=None) -> DataFrame:
    """(topo, source, member) -> + ip_us (bigint): unicast host latency from the topology.

    O(rows) vectorized numpy per Arrow batch; one topology load per worker process.
    """
    run_dir = str(run_dir)

    def add_latency(batches):
        for pdf in batches:
            ip = np.zeros(len(pdf), dtype=np.int64)
            for t in pdf["topo"].unique():
                rows = (pdf["topo"] == t).to_numpy()
                topo = load_topology(run_dir, int(t), reader)
                ip[rows] = np.asarray(topo.latency(pdf["source"].to_numpy()[rows],
                                                   pdf["member"].to_numpy()[rows]),
                                      dtype=np.int64)
            yield pdf.assign(ip_us=ip)

    return by_topology(pairs).mapInPandas(add_latency,
                                          "topo int, source int, member int, ip_us bigint")


def member_delays(delivery: DataFrame, run_dir: str | Path, reader=None) -> DataFrame:
    """Per member of each multicast: Scribe and IP-multicast delays.

    Schema: topo int, variant string, group int, source int, member int,
    scribe_us double (mean over the messages of that source, duplicates counted once at
    their first arrival), ip_us bigint, messages bigint.
    """
    first_arrival = (delivery.where(F.col("member") != F.col("source"))
                     .groupBy("topo", "variant", "group", "source", "member", "seqno")
                     .agg(F.min(F.col("time") - F.col("publish_time")).alias("delay_us")))
    scribe = (first_arrival.groupBy("topo", "variant", "group", "source", "member")
              .agg(F.avg("delay_us").alias("scribe_us"), F.count("*").alias("messages")))
    ip = ip_latency_table(scribe.select("topo", "source", "member").distinct(), run_dir,
                          reader)
    return scribe.join(ip, ["topo", "source", "member"])


def _group_attributes(groups: DataFrame) -> DataFrame:
    return (groups.groupBy("topo", "group")
            .agg(F.min("rank").alias("rank"), F.max("size").alias("size")))


def delay_penalty_by_group(delays: DataFrame, groups: DataFrame) -> DataFrame:
    """Per group: RAD = mean Scribe / mean IP delay, RMD = max Scribe / max IP delay.

    Schema: topo int, variant string, group int, rank int, size int, members bigint,
    mean_scribe_us, mean_ip_us, max_scribe_us, max_ip_us, rad, rmd (double).
    """
    per_group = (delays.groupBy("topo", "variant", "group")
                 .agg(F.count("*").alias("members"),
                      F.avg("scribe_us").alias("mean_scribe_us"),
                      F.avg("ip_us").alias("mean_ip_us"),
                      F.max("scribe_us").alias("max_scribe_us"),
                      F.max("ip_us").cast("double").alias("max_ip_us")))
    return (per_group.join(_group_attributes(groups), ["topo", "group"], "left")
            .withColumn("rad", F.col("mean_scribe_us") / F.col("mean_ip_us"))
            .withColumn("rmd", F.col("max_scribe_us") / F.col("max_ip_us"))
            .select("topo", "variant", "group", "rank", "size", "members", "mean_scribe_us",
                    "mean_ip_us", "max_scribe_us", "max_ip_us", "rad", "rmd"))


def delay_penalty_summary(by_group: DataFrame) -> DataFrame:
    """Distribution of RAD and RMD over groups, per topology and variant, plus the mean row.

    Schema: topo string, variant string, groups bigint, rad_mean, rad_median, rad_max,
    rad_p90, rmd_mean, rmd_median, rmd_max, rmd_p90 (double).
    """
    q = {"p90": 0.9}
    summary = (by_group.groupBy("topo", "variant")
               .agg(F.count("*").alias("groups"), *distribution_aggs("rad", "rad", q),
                    *distribution_aggs("rmd", "rmd", q)))
    return with_topology_mean(summary, ["variant"])


def rdp_rank1(delays: DataFrame, groups: DataFrame) -> DataFrame:
    """RDP = Scribe delay / IP delay per member of the rank-1 (largest) group.

    Schema: topo int, variant string, group int, member int, scribe_us double, ip_us bigint,
    rdp double.
    """
    rank1 = _group_attributes(groups).where(F.col("rank") == 1).select("topo", "group")
    return (delays.join(rank1, ["topo", "group"])
            .withColumn("rdp", F.col("scribe_us") / F.col("ip_us"))
            .select("topo", "variant", "group", "member", "scribe_us", "ip_us", "rdp"))


def rdp_rank1_summary(rdp: DataFrame) -> DataFrame:
    """Distribution of the rank-1 group's RDP per topology and variant, plus the mean row.

    Schema: topo string, variant string, members bigint, mean, median, max, p80, p98,
    frac_below_1 (double; fraction of members whose Scribe delay beats IP).
    """
    summary = (rdp.groupBy("topo", "variant")
               .agg(F.count("*").alias("members"),
                    *distribution_aggs("rdp", "rdp", {"p80": 0.8, "p98": 0.98}),
                    F.avg((F.col("rdp") < 1).cast("double")).alias("rdp_frac_below_1")))
    for c in summary.columns:
        if c.startswith("rdp_"):
            summary = summary.withColumnRenamed(c, c[4:])
    return with_topology_mean(summary, ["variant"])

