"""Delay penalty (RAD, RMD per group) and RDP of the rank-1 group (SPEC section 6).

Scribe delay of a member = delivery.time - delivery.publish_time (from the multicast at the
source, the RP in the experiments, to delivery); duplicates of one message count at their
first arrival, several messages from one source are averaged. IP-multicast delay = unicast
latency source -> member, `topo.latency(source, member)`. The source itself (member ==
source) is left out: both delays are 0 there.

Spark: one grouped map. Deliveries and group rows are cogrouped by (topology, group bucket)
(bucket = group mod the shuffle partitions, so a cluster spreads the groups over its
cores); each call loads its topology once and computes, in numpy, every group's figures and
the rank-1 group's per-member rows. The driver collects those (one row per group, one per
rank-1 member) and computes the distributions.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.physical import TopologyFiles
from analysis.placement import SLOT, placed
from analysis.stats import distribution, exact_mean, group_fsum, with_topology_mean
from analysis.variants import variant_columns, variant_names

# kind 0: one row per (variant, group); kind 1: one row per rank-1 (variant, member)
DELAY_SCHEMA = ("kind tinyint, topo int, variant string, group int, member int, rank int, "
                "size int, members bigint, mean_scribe_us double, mean_ip_us double, "
                "max_scribe_us double, max_ip_us double, scribe_us double, ip_us bigint")
_DELAY_COLUMNS = [c.split()[0] for c in DELAY_SCHEMA.split(", ")]


def delay_rows(delivery: DataFrame, groups: DataFrame, files: TopologyFiles,
               buckets: int, topologies: list[int], partitions: int) -> DataFrame:
    """The per-group and rank-1 per-member rows (DELAY_SCHEMA) of every topology/variant.
    The (topology, bucket) keys are dealt out to the `partitions` in turn
    (`analysis.placement`)."""
    d = (delivery.where(F.col("member") != F.col("source"))
         .select("topo", *variant_columns(F.col("variant")), "group", "source", "member",
                 "seqno",
                 (F.col("time") - F.col("publish_time")).alias("delay_us"))
         .withColumn("bucket", F.pmod(F.col("group"), F.lit(buckets))))
    g = (groups.select("topo", "group", "rank", "size")
         .withColumn("bucket", F.pmod(F.col("group"), F.lit(buckets))))
    keys = [(t, b) for t in topologies for b in range(buckets)]
    d = placed(d, ["topo", "bucket"], keys, partitions)
    g = placed(g, ["topo", "bucket"], keys, partitions)

    def compute(deliveries: pd.DataFrame, group_rows: pd.DataFrame) -> pd.DataFrame:
        if not len(deliveries):
            return pd.DataFrame(columns=_DELAY_COLUMNS)
        topo = files.load(int(deliveries["topo"].iat[0]))
        return group_delays(deliveries.assign(variant=variant_names(deliveries)), group_rows,
                            topo)

    return (d.groupBy(SLOT, "topo", "bucket").cogroup(g.groupBy(SLOT, "topo", "bucket"))
            .applyInPandas(compute, DELAY_SCHEMA))


def _codes(*columns: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Dense ids of the distinct rows of `columns` (lexicographic order) and their values."""
    frame = pd.DataFrame({str(i): c for i, c in enumerate(columns)})
    codes = frame.groupby(list(frame.columns), sort=True).ngroup().to_numpy()
    first = np.unique(codes, return_index=True)[1]
    return codes, [c[first] for c in columns]


def group_delays(deliveries: pd.DataFrame, group_rows: pd.DataFrame, topo) -> pd.DataFrame:
    """numpy kernel of `delay_rows` for the deliveries of some groups of one topology."""
    t = int(deliveries["topo"].iat[0])
    variant = deliveries["variant"].to_numpy(object)
    group = deliveries["group"].to_numpy(np.int64)
    source = deliveries["source"].to_numpy(np.int64)
    member = deliveries["member"].to_numpy(np.int64)
    # first arrival of each message copy, then the mean over a source's messages (exact:
    # integer sums divided once)
    msg, (v1, g1, s1, m1, _) = _codes(variant, group, source, member,
                                      deliveries["seqno"].to_numpy(np.int64))
    first = np.full(len(v1), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, msg, deliveries["delay_us"].to_numpy(np.int64))
    pair, (v2, g2, s2, m2) = _codes(v1, g1, s1, m1)
    total = np.bincount(pair, minlength=len(v2)).astype(np.int64)
    sums = np.zeros(len(v2), np.int64)
    np.add.at(sums, pair, first)
    scribe_us = sums.astype(np.float64) / total
    ip_us = np.asarray(topo.latency(s2, m2), np.int64)
    # per (variant, group): rows are sorted by (variant, group, source, member)
    grp, (v3, g3) = _codes(v2, g2)
    members = np.bincount(grp, minlength=len(v3)).astype(np.int64)
    mean_scribe = group_fsum(grp, scribe_us) / members
    ip_sum = np.zeros(len(v3), np.int64)
    np.add.at(ip_sum, grp, ip_us)
    max_scribe = np.full(len(v3), -np.inf)
    np.maximum.at(max_scribe, grp, scribe_us)
    max_ip = np.full(len(v3), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(max_ip, grp, ip_us)
    attrs = _group_attributes(group_rows)
    rank = attrs["rank"].reindex(g3).to_numpy(np.float64, na_value=np.nan)
    size = attrs["size"].reindex(g3).to_numpy(np.float64, na_value=np.nan)
    rank1 = attrs.index[attrs["rank"] == 1].to_numpy(np.int64)
    sel = np.isin(g2, rank1)
    n_g, n_m = len(v3), int(sel.sum())

    def both(per_group, per_member):   # kind-0 rows then kind-1 rows; NaN = null
        return np.concatenate([np.asarray(per_group, np.float64),
                               np.asarray(per_member, np.float64)])

    none_g, none_m = np.full(n_g, np.nan), np.full(n_m, np.nan)
    return pd.DataFrame({
        "kind": np.r_[np.zeros(n_g, np.int8), np.ones(n_m, np.int8)], "topo": t,
        "variant": np.concatenate([v3.astype(object), v2[sel].astype(object)]),
        "group": np.concatenate([g3, g2[sel]]), "member": both(none_g, m2[sel]),
        "rank": both(rank, np.ones(n_m)), "size": both(size, none_m),
        "members": both(members, none_m), "mean_scribe_us": both(mean_scribe, none_m),
        "mean_ip_us": both(ip_sum.astype(np.float64) / members, none_m),
        "max_scribe_us": both(max_scribe, none_m), "max_ip_us": both(max_ip, none_m),
        "scribe_us": both(none_g, scribe_us[sel]), "ip_us": both(none_g, ip_us[sel])},
        columns=_DELAY_COLUMNS)


def _group_attributes(group_rows: pd.DataFrame) -> pd.DataFrame:
    """rank = min(rank), size = max(size) per group (a group logged twice keeps one)."""
    if not len(group_rows):
        return pd.DataFrame({"rank": pd.Series(dtype="Int64"), "size": pd.Series(dtype="Int64")})
    return group_rows.groupby("group").agg(rank=("rank", "min"), size=("size", "max"))


def _ratio(num: pd.Series, den: pd.Series) -> pd.Series:
    """num / den with Spark's null for a zero or null divisor."""
    den = den.astype("float64")
    return (num.astype("float64") / den).where(den != 0)


def by_group_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """delay_penalty_by_group.csv from the collected kind-0 rows."""
    g = rows[rows["kind"] == 0]
    out = pd.DataFrame({
        "topo": g["topo"].astype("int64"), "variant": g["variant"],
        "group": g["group"].astype("int64"), "rank": g["rank"].astype("Int64"),
        "size": g["size"].astype("Int64"), "members": g["members"].astype("int64"),
        "mean_scribe_us": g["mean_scribe_us"], "mean_ip_us": g["mean_ip_us"],
        "max_scribe_us": g["max_scribe_us"], "max_ip_us": g["max_ip_us"]})
    out["rad"] = _ratio(out["mean_scribe_us"], out["mean_ip_us"])
    out["rmd"] = _ratio(out["max_scribe_us"], out["max_ip_us"])
    return out.reset_index(drop=True)


def rdp_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """rdp_rank1.csv from the collected kind-1 rows."""
    m = rows[rows["kind"] == 1]
    out = pd.DataFrame({"topo": m["topo"].astype("int64"), "variant": m["variant"],
                        "group": m["group"].astype("int64"),
                        "member": m["member"].astype("int64"),
                        "scribe_us": m["scribe_us"], "ip_us": m["ip_us"].astype("int64")})
    out["rdp"] = _ratio(out["scribe_us"], out["ip_us"])
    return out.reset_index(drop=True)


def delay_penalty_summary(by_group: pd.DataFrame) -> pd.DataFrame:
    """Distribution of RAD and RMD over groups, per topology and variant, plus the mean row.

    Columns: topo string, variant string, groups, rad_mean, rad_median, rad_max, rad_p90,
    rmd_mean, rmd_median, rmd_max, rmd_p90 (double).
    """
    rows = []
    for (t, v), part in by_group.groupby(["topo", "variant"], sort=True):
        rows.append({"topo": t, "variant": v, "groups": len(part),
                     **distribution(part["rad"].to_numpy(np.float64, na_value=np.nan),
                                    "rad", {"p90": 0.9}),
                     **distribution(part["rmd"].to_numpy(np.float64, na_value=np.nan),
                                    "rmd", {"p90": 0.9})})
    cols = ["topo", "variant", "groups", "rad_mean", "rad_median", "rad_max", "rad_p90",
            "rmd_mean", "rmd_median", "rmd_max", "rmd_p90"]
    return with_topology_mean(pd.DataFrame(rows, columns=cols), ["variant"], cols[2:])


def rdp_rank1_summary(rdp: pd.DataFrame) -> pd.DataFrame:
    """Distribution of the rank-1 group's RDP per topology and variant, plus the mean row.

    Columns: topo string, variant string, members, mean, median, max, p80, p98,
    frac_below_1 (double; fraction of members whose Scribe delay beats IP).
    """
    rows = []
    for (t, v), part in rdp.groupby(["topo", "variant"], sort=True):
        r = part["rdp"].to_numpy(np.float64, na_value=np.nan)
        stats = distribution(r, "rdp", {"p80": 0.8, "p98": 0.98})
        known = r[~np.isnan(r)]
        rows.append({"topo": t, "variant": v, "members": len(part),
                     **{k[4:]: x for k, x in stats.items()},
                     "frac_below_1": exact_mean((known < 1).astype(np.int64))})
    cols = ["topo", "variant", "members", "mean", "median", "max", "p80", "p98",
            "frac_below_1"]
    return with_topology_mean(pd.DataFrame(rows, columns=cols), ["variant"], cols[2:])
