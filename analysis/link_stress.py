"""Link stress per directed physical link (SPEC section 6).

Packets per directed link when one message is multicast to every group:
- Scribe (per traffic selection, see `analysis.schema.Traffic`): every selected overlay hop
  src -> dst loads the uplink of src, the core route router(src) -> router(dst), and the
  downlink of dst (routers from the topology's `host_router`).
- IP multicast: per group, the union of the unicast routes from the source (the group's RP)
  to each member (membership table); each link of the union carries one copy.
- Naive unicast: one unicast copy from the source to each member.
Topologies without physical paths (`has_paths` False) get no link rows; their summary rows
have null figures and a note.

Spark: one grouped map over all packets (see `link_loads`), whose numpy kernel counts the
LAN links with a bincount and expands each distinct router pair once (`route_links`); the
driver collects the summed loads (link_stress.csv) and computes summary and histogram.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.physical import TopologyFiles, core_pair_loads, core_union_counts
from analysis.placement import SLOT, placed
from analysis.schema import Traffic
from analysis.stats import (
    exact_mean,
    sorted_unique,
    spark_percentile,
    unique_rows,
    with_topology_mean,
)

NO_PATHS_NOTE = "not available: the topology has no physical paths (latency matrix only)"
LOADS_SCHEMA = "topo int, traffic string, link bigint, stress bigint"
LINK_KINDS = ["core", "lan_down", "lan_up"]   # link_stress.csv's kind, by code
PRESENT = -1   # link id of the marker row "this traffic has rows" (topologies without paths)
IP_MULTICAST, NAIVE_UNICAST = "ip_multicast", "naive_unicast"
MULTICAST_PAIRS = "multicast pairs"   # (source, member) rows both baselines are made of


def overlay_hops(message: DataFrame, traffic: tuple[Traffic, ...], labels: list) -> DataFrame:
    """Selected overlay hops as (topo, traffic, group, src, dst) from one scan of `message`,
    `traffic` = `labels[i]` (a column) for selection i; a row in several selections counts
    in each.

    Disjoint selections (the default ones: one phase each) label a row with one CASE
    expression; overlapping ones explode an array of labels, which Spark evaluates row by
    row outside its generated code, several times slower on millions of hops."""
    conds = [F.col("phase").isin(list(t.phases)) & F.col("type").isin(list(t.types))
             for t in traffic]
    if _disjoint(traffic):
        label = None
        for cond, value in zip(conds, labels, strict=True):
            label = F.when(cond, value) if label is None else label.when(cond, value)
        return (message.select("topo", "group", "src", "dst", label.alias("traffic"))
                .where(F.col("traffic").isNotNull())
                .select("topo", "traffic", "group", "src", "dst"))
    array = F.array(*[F.when(cond, value) for cond, value in zip(conds, labels, strict=True)])
    return (message.select("topo", "group", "src", "dst",
                           F.explode(F.filter(array, lambda x: x.isNotNull()))
                           .alias("traffic"))
            .select("topo", "traffic", "group", "src", "dst"))


def _disjoint(traffic: tuple[Traffic, ...]) -> bool:
    """No message row can be in two of the selections (no shared phase and type)."""
    for i, a in enumerate(traffic):
        for b in traffic[i + 1:]:
            if set(a.phases) & set(b.phases) and set(a.types) & set(b.types):
                return False
    return True


def multicast_pairs(membership: DataFrame, groups: DataFrame) -> DataFrame:
    """(topo, group, source, member): each member of each group, source = the group's RP.

    The source itself is left out (no packet leaves the host for it).
    """
    rp = groups.groupBy("topo", "group").agg(F.min("rp").alias("source"))
    return (membership.select("topo", "group", "member").distinct()
            .join(rp, ["topo", "group"])
            .where(F.col("member") != F.col("source"))
            .select("topo", "group", "source", "member"))


def link_loads(message: DataFrame, membership: DataFrame, groups: DataFrame,
               traffic: tuple[Traffic, ...], files: TopologyFiles, meta: dict[int, dict],
               buckets: int, partitions: int) -> DataFrame:
    """Non-zero stress per (topo, traffic, directed link) (LOADS_SCHEMA), plus one marker
    row (link = PRESENT) per (topo, traffic) with rows in a topology without paths.

    Scribe hops and the multicast (source, member) pairs are one frame of host-to-host
    packets (topo, traffic code, group, src, dst), grouped by (topo, traffic, group
    bucket): each call expands its packets in numpy (`packet_loads`; a call of pairs gives
    both naive unicast and IP multicast); Spark sums the partial loads of the buckets. IP
    multicast keeps each group whole in one call (its union of routes).
    `buckets` 1: one call per (topo, traffic) and no sums -- the partial rows and their
    shuffle cost as much as the rest of the section (benchmarks/bench_analysis.py times it).
    The (topo, traffic, bucket) keys are dealt out to the `partitions` in turn
    (`analysis.placement`).
    """
    # rows carry a traffic code, not its name (a smaller shuffle); the multicast pairs
    # travel once and give both baselines in one call
    labels = [t.label for t in traffic] + [MULTICAST_PAIRS]
    pairs = multicast_pairs(membership, groups)
    packets = (overlay_hops(message, traffic, [F.lit(i) for i in range(len(traffic))])
               .unionByName(pairs.select("topo", F.lit(len(traffic)).alias("traffic"),
                                         "group", F.col("source").alias("src"),
                                         F.col("member").alias("dst")))
               .withColumn("bucket", F.pmod(F.coalesce(F.col("group"), F.lit(0)),
                                            F.lit(max(1, buckets)))))
    keys = [(t, code, b) for t in sorted(meta) for code in range(len(labels))
            for b in range(max(1, buckets))]
    packets = placed(packets, ["topo", "traffic", "bucket"], keys, partitions)

    def compute(key, pdf: pd.DataFrame) -> pd.DataFrame:
        t, label = int(key[1]), labels[int(key[2])]     # key: (slot, topo, traffic, bucket)
        if label != MULTICAST_PAIRS:
            return packet_loads(t, label, pdf, files, meta[t])
        return pd.concat([packet_loads(t, NAIVE_UNICAST, pdf, files, meta[t]),
                          packet_loads(t, IP_MULTICAST, pdf, files, meta[t])],
                         ignore_index=True)

    loads = packets.groupBy(SLOT, "topo", "traffic", "bucket").applyInPandas(compute,
                                                                             LOADS_SCHEMA)
    if buckets <= 1:    # each call has all packets of its (topo, traffic): no partial sums
        return loads
    return loads.groupBy("topo", "traffic", "link").agg(F.sum("stress").alias("stress"))


def packet_loads(t: int, label: str, pdf: pd.DataFrame, files: TopologyFiles,
                 meta: dict) -> pd.DataFrame:
    """numpy kernel: the load of some packets of one (topology, traffic) on every link."""
    if not len(pdf):
        return pd.DataFrame(columns=["topo", "traffic", "link", "stress"])
    if not meta["has_paths"]:
        return pd.DataFrame({"topo": [t], "traffic": [label], "link": [PRESENT],
                             "stress": [0]})
    topo = files.load(t)
    src = pdf["src"].to_numpy(np.int64)
    dst = pdf["dst"].to_numpy(np.int64)
    router = np.asarray(topo.host_router, np.int64)
    base, n_links = int(meta["lan_base"]), int(meta["n_links"])
    if label == IP_MULTICAST:
        loads = _ip_multicast_loads(topo, pdf["group"].to_numpy(np.int64), src, dst, router,
                                    base, n_links)
    else:
        loads = np.bincount(base + 2 * src, minlength=n_links)
        loads += np.bincount(base + 2 * dst + 1, minlength=n_links)
        sr, dr = router[src], router[dst]
        core = sr != dr
        keys, counts = sorted_unique(sr[core] * np.int64(1 << 32) + dr[core], return_counts=True)
        loads += core_pair_loads(topo, keys >> 32, keys & 0xFFFFFFFF, counts)
    links = np.flatnonzero(loads)
    return pd.DataFrame({"topo": t, "traffic": label, "link": links.astype(np.int64),
                         "stress": loads[links].astype(np.int64)})


def _ip_multicast_loads(topo, group, src, dst, router, base, n_links) -> np.ndarray:
    """IP multicast: per group, the source's uplink once, each member's downlink, and the
    union of the core routes source router -> member routers (each link once)."""
    _, sources = unique_rows(group, src)
    loads = np.bincount(base + 2 * sources, minlength=n_links)
    loads += np.bincount(base + 2 * dst + 1, minlength=n_links)
    sr, dr = router[src], router[dst]
    core = sr != dr
    tree_group, tree_src, tree_dst = unique_rows(group[core], sr[core], dr[core])
    if len(tree_group):   # one source per group: the tree of a row is its group
        tree_id = np.unique(tree_group, return_inverse=True)[1].ravel()
        loads += core_union_counts(topo, tree_id, tree_src, tree_dst)
    return loads


def link_stress_frame(loads: pd.DataFrame, meta: dict[int, dict]) -> pd.DataFrame:
    """link_stress.csv (topo, traffic, link, kind core|lan_up|lan_down, stress) from the
    collected loads (marker rows dropped)."""
    real = loads[loads["link"] != PRESENT]
    topo = real["topo"].to_numpy(np.int64)
    topos = np.array(sorted(meta), np.int64)
    bases = np.array([meta[t]["lan_base"] for t in sorted(meta)], np.int64)
    base = bases[np.searchsorted(topos, topo)] if len(topo) else np.zeros(0, np.int64)
    link = real["link"].to_numpy(np.int64)
    # the kind as codes into its names, not a column of millions of strings
    code = np.where(link < base, 0, np.where((link - base) % 2 == 0, 2, 1)).astype(np.int8)
    return pd.DataFrame({"topo": topo,
                         "traffic": pd.Categorical(real["traffic"]), "link": link,
                         "kind": pd.Categorical.from_codes(code, LINK_KINDS),
                         "stress": real["stress"].to_numpy(np.int64)})


def link_stress_summary(loads: pd.DataFrame, stress: pd.DataFrame,
                        meta: dict[int, dict]) -> pd.DataFrame:
    """Per (topo, traffic): total packets, mean/median/max over links with non-zero stress,
    links (all directed links of the topology), links_nonzero, mean_all_links (total/links),
    note; plus the mean row over topologies.

    Topologies without paths get one row per traffic with rows (and always ip_multicast
    and naive_unicast) with null figures and NO_PATHS_NOTE.
    """
    cols = ["topo", "traffic", "total", "mean", "median", "max", "links", "links_nonzero",
            "mean_all_links", "note"]
    rows = []
    for (t, label), part in stress.groupby(["topo", "traffic"], sort=True, observed=True):
        s = part["stress"].to_numpy(np.int64)
        total = float(int(s.sum()))
        links = float(meta[int(t)]["n_links"])
        rows.append({"topo": int(t), "traffic": label, "total": total,
                     "mean": exact_mean(s), "median": spark_percentile(s, 0.5),
                     "max": float(s.max()), "links": links, "links_nonzero": float(len(s)),
                     "mean_all_links": total / links if links else None, "note": None})
    markers = loads[loads["link"] == PRESENT]
    missing = {(int(t), str(label)) for t, label in zip(markers["topo"], markers["traffic"],
                                                        strict=True)}
    for t, m in meta.items():
        if not m["has_paths"]:
            missing |= {(int(t), IP_MULTICAST), (int(t), NAIVE_UNICAST)}
    for t, label in sorted(missing):
        rows.append({"topo": t, "traffic": label, **dict.fromkeys(cols[2:-1]),
                     "note": NO_PATHS_NOTE})
    frame = pd.DataFrame(rows, columns=cols)
    return with_topology_mean(frame, ["traffic"], cols[2:-1])


def link_stress_histogram(stress: pd.DataFrame) -> pd.DataFrame:
    """Number of directed links per non-zero stress value.

    Columns: topo int, traffic string, stress bigint, links bigint.
    """
    out = (stress.groupby(["topo", "traffic", "stress"], sort=True, observed=True).size()
           .reset_index(name="links"))
    return out.astype({"topo": "int64", "traffic": str, "stress": "int64", "links": "int64"})
