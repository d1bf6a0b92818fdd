"""`run_analysis`: every metric of a run directory, as CSVs, figures and summary.json."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from analysis import churn, delay, figures, link_stress, node_stress, overlay, published, spread
from analysis.load import load_events
from analysis.output import write_csv, write_json
from analysis.physical import lan_base, load_topology
from analysis.schema import BASELINES, AnalysisOptions

CREATE_TYPE = 60  # Scribe CREATE; analysis may not import actors/ (test_analysis_schema checks)


def topology_indices(run_dir: Path) -> list[int]:
    """Topology indices t with a RUN_DIR/topology/topo-<t>.npz file, ascending."""
    found = []
    for p in (run_dir / "topology").glob("topo-*.npz"):
        m = re.fullmatch(r"topo-(\d+)\.npz", p.name)
        if m:
            found.append(int(m.group(1)))
    return sorted(found)


def topology_meta(run_dir: Path, indices: list[int], reader=None) -> pd.DataFrame:
    """One row per topology: topo, n_links, n_hosts, lan_base, has_paths."""
    rows = []
    for t in indices:
        topo = load_topology(run_dir, t, reader)
        rows.append({"topo": t, "n_links": int(topo.n_links), "n_hosts": int(topo.n_hosts),
                     "lan_base": lan_base(topo), "has_paths": bool(topo.has_paths)})
    return pd.DataFrame(rows)


def _stats(row: pd.Series, prefix: str, names: list[str]) -> dict:
    return {n: _num(row.get(f"{prefix}{n}")) for n in names}


def _num(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def _mean_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["topo"] == "mean"]


def run_analysis(run_dir: str | Path, spark: SparkSession, refs: dict[str, list] | None = None,
                 scenario_meta: dict | None = None, extra: dict | None = None,
                 options: AnalysisOptions | None = None) -> dict:
    """Compute every metric of RUN_DIR and write metrics/*.csv, figures/*.png, summary.json.

    refs: optional {table: [ObjectRef of pyarrow.Table]} (emu.logs) used instead of the
    Parquet logs for those tables. scenario_meta: {"scenario", "nodes", "groups", ...} put at
    the top of the summary. extra: merged last into summary.json (e.g. "timing"; dicts are
    merged one level deep). An existing summary.json's keys are kept unless recomputed.
    Returns the summary dict.
    """
    started = time.perf_counter()
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"run directory {run_dir} does not exist")
    options = options or AnalysisOptions()
    indices = topology_indices(run_dir)
    if not indices:
        raise ValueError(f"no topology files in {run_dir / 'topology'} (expected topo-<t>.npz)")
    reader = options.topology_reader
    meta_pd = topology_meta(run_dir, indices, reader)
    meta = spark.createDataFrame(
        meta_pd, "topo int, n_links bigint, n_hosts bigint, lan_base bigint, has_paths boolean")
    ev = load_events(spark, run_dir, refs)
    logged_topos = {r["topo"] for r in ev["host"].select("topo").distinct().collect()}
    missing = sorted(logged_topos - set(indices))
    if missing:
        raise ValueError(f"event logs name topology {missing[0]} but {run_dir}/topology/"
                         f"topo-{missing[0]}.npz is missing")
    metrics, figs = run_dir / "metrics", run_dir / "figures"
    timing: dict[str, float] = {}
    marks = published.figure_marks((scenario_meta or {}).get(   # the paper's figures drawn
        "scenario", run_dir.name.rsplit("-", 1)[0]))          # over ours, if it has some

    # delay penalty
    t0 = time.perf_counter()
    delays = delay.member_delays(ev["delivery"], run_dir, reader).cache()
    by_group = delay.delay_penalty_by_group(delays, ev["group"]).cache()
    rdp = delay.rdp_rank1(delays, ev["group"]).cache()
    dp_summary = delay.delay_penalty_summary(by_group)
    rdp_summary = delay.rdp_rank1_summary(rdp)
    write_csv(by_group, metrics / "delay_penalty_by_group.csv", ["topo", "variant", "group"])
    write_csv(rdp, metrics / "rdp_rank1.csv", ["topo", "variant", "member"])
    dp_pd = dp_summary.toPandas().sort_values(["topo", "variant"])
    rdp_pd = rdp_summary.toPandas().sort_values(["topo", "variant"])
    write_csv(dp_summary, metrics / "delay_penalty_summary.csv", ["topo", "variant"])
    write_csv(rdp_summary, metrics / "rdp_rank1_summary.csv", ["topo", "variant"])
    figures.delay_penalty_cdf(by_group.select("variant", "rad", "rmd").toPandas(),
                              figs / "delay_penalty_cdf.png", marks.get("delay_penalty_cdf"))
    figures.rdp_cdf(rdp.select("variant", "rdp").toPandas(), figs / "rdp_rank1_cdf.png",
                    marks.get("rdp_rank1_cdf"))
    delays.unpersist()
    timing["delay_penalty"] = time.perf_counter() - t0

    # node stress
    t0 = time.perf_counter()
    nodes = node_stress.all_nodes(ev["host"], ev["tree_edge"], ev["membership"])
    stress = node_stress.node_stress(ev["tree_edge"], nodes).cache()
    ns_summary = node_stress.node_stress_summary(stress)
    ns_hist = node_stress.node_stress_histogram(stress)
    write_csv(stress, metrics / "node_stress.csv", ["topo", "variant", "node"])
    write_csv(ns_summary, metrics / "node_stress_summary.csv", ["topo", "variant", "population"])
    ns_hist_pd = ns_hist.toPandas()
    write_csv(spark.createDataFrame(ns_hist_pd, ns_hist.schema),
              metrics / "node_stress_histogram.csv", ["topo", "variant", "measure", "value"])
    ns_pd = ns_summary.toPandas()
    figures.node_stress_distribution(ns_hist_pd, figs / "node_stress.png", marks)
    stress.unpersist()
    timing["node_stress"] = time.perf_counter() - t0

    # link stress
    t0 = time.perf_counter()
    links = link_stress.link_stress(ev["message"], ev["membership"], ev["group"], ev["host"],
                                    meta, options.traffic, run_dir, reader).cache()
    ls_summary = link_stress.link_stress_summary(links, meta, ev["message"], options.traffic)
    ls_hist = link_stress.link_stress_histogram(links)
    write_csv(links, metrics / "link_stress.csv", ["topo", "traffic", "link"])
    ls_hist_pd = ls_hist.toPandas()
    write_csv(spark.createDataFrame(ls_hist_pd, ls_hist.schema),
              metrics / "link_stress_histogram.csv", ["topo", "traffic", "stress"])
    ls_pd = ls_summary.toPandas()
    write_csv(spark.createDataFrame(ls_pd, ls_summary.schema),
              metrics / "link_stress_summary.csv", ["topo", "traffic"])
    if len(ls_hist_pd):
        figures.link_stress_distribution(ls_hist_pd, figs / "link_stress.png",
                                         marks.get("link_stress"))
    links.unpersist()
    timing["link_stress"] = time.perf_counter() - t0

    # overlay and groups
    t0 = time.perf_counter()
    hops_summary = overlay.overlay_hops_summary(ev["route"], options.type_names,
                                                ev["message_type"])
    write_csv(overlay.overlay_hops_histogram(ev["route"]), metrics / "overlay_hops.csv",
              ["topo", "phase", "type", "hops"])
    write_csv(hops_summary, metrics / "overlay_hops_summary.csv", ["topo", "phase", "type"])
    write_csv(overlay.messages_by_type(ev["message"], options.type_names, ev["message_type"]),
              metrics / "messages_by_type.csv", ["topo", "phase", "type"])
    probes_pd = overlay.probes_per_join(ev["probe"], ev["membership"]).toPandas()
    write_csv(spark.createDataFrame(probes_pd, "topo int, probes bigint, nodes_probing bigint, "
                                    "joins bigint, probes_per_join double"),
              metrics / "probes.csv", ["topo"])
    groups_pd = overlay.group_sizes(ev["group"], ev["membership"]).toPandas()
    write_csv(spark.createDataFrame(groups_pd, "topo int, group int, rank int, size int, "
                                    "rp int, members bigint"),
              metrics / "groups.csv", ["topo", "rank"])
    if len(groups_pd):
        figures.group_size_by_rank(groups_pd, figs / "group_size_by_rank.png")
    # Pastry's route length is measured on CREATE routes (random node to a random key, never
    # cut short); JOINs stop at the first tree node and multicasts start at the RP (0 hops),
    # so the mean over all routes says little about Pastry.
    full = F.col("type") == CREATE_TYPE
    route_means = (ev["route"].groupBy("topo").agg(
        F.avg("hops").alias("mean_hops_all"), F.count("*").alias("routes"),
        F.avg(F.when(full, F.col("hops"))).alias("mean_hops"),
        F.sum(full.cast("int")).alias("full_routes")).toPandas())
    timing["overlay"] = time.perf_counter() - t0

    # churn: only when the run logged a multicast stream or failures
    churn_summary = None
    if ev["publish"].limit(1).count() or ev["node_event"].limit(1).count():
        t0 = time.perf_counter()
        churn_summary = _churn(spark, ev, options, metrics, figs)
        timing["churn"] = time.perf_counter() - t0

    summary = _summary(run_dir, scenario_meta or {}, indices, meta_pd, groups_pd, options,
                       dp_pd, rdp_pd, ns_pd, ls_pd, route_means, probes_pd)
    if churn_summary is not None:
        summary["churn"] = churn_summary
    summary["spread"] = spread.add_spread(metrics)   # std, 95 % CI across topologies
    timing["analysis_total"] = time.perf_counter() - started
    summary["timing"] = {f"analysis_{k}" if not k.startswith("analysis") else k: round(v, 3)
                         for k, v in timing.items()}
    return _merge_and_write(run_dir / "summary.json", summary, extra or {})


def churn_bucket_us(messages_span_us: int, requested: int | None) -> int:
    """Bucket width: the requested one, else 1/20 of the stream rounded up to whole ms."""
    if requested is not None:
        if requested <= 0:
            raise ValueError(f"churn_bucket_us must be positive, got {requested}")
        return int(requested)
    return max(1000, -(-max(int(messages_span_us), 1) // 20 // 1000) * 1000)


def _churn(spark: SparkSession, ev: dict, options: AnalysisOptions, metrics: Path,
           figs: Path) -> dict | None:
    """Churn CSVs and figure; returns the summary.json entry (None: no stream logged)."""
    inferred = ev["publish"].limit(1).count() == 0
    messages = churn.published_messages(ev["publish"], ev["delivery"], inferred,
                                        options.churn_phases).cache()
    span = messages.agg(F.min("publish_time").alias("lo"),
                        F.max("publish_time").alias("hi")).first()
    if span["lo"] is None:
        messages.unpersist()
        return None
    bucket_us = churn_bucket_us(span["hi"] - span["lo"], options.churn_bucket_us)
    dead = churn.dead_intervals(ev["node_event"]).cache()
    expected = churn.expected_deliveries(messages, ev["membership"], dead)
    arrivals = churn.first_arrivals(ev["delivery"], messages, options.churn_phases).cache()
    outcomes = churn.delivery_outcomes(expected, arrivals).cache()
    buckets = churn.churn_delivery(outcomes, arrivals, messages, dead, bucket_us).cache()
    outages = churn.churn_outages(outcomes).cache()
    failovers = churn.churn_rp_failover(messages, arrivals, ev["group"], ev["node_event"]).cache()
    source = "delivery" if inferred else "publish"
    summary = churn.churn_summary(churn.delivery_summary(outcomes, arrivals, buckets),
                                  outages, failovers, source)
    write_csv(buckets, metrics / "churn_delivery.csv", ["topo", "variant", "bucket"])
    write_csv(outages, metrics / "churn_outages.csv", ["topo", "variant", "group", "member",
                                                       "start_us"])
    write_csv(failovers, metrics / "churn_rp_failover.csv", ["topo", "variant", "group"])
    summary_pd = summary.toPandas()
    write_csv(spark.createDataFrame(summary_pd, summary.schema), metrics / "churn_summary.csv",
              ["topo", "variant"])
    buckets_pd = buckets.toPandas()
    if len(buckets_pd):
        figures.churn_delivery(buckets_pd, figs / "churn_delivery.png")
    for df in (messages, dead, arrivals, outcomes, buckets, outages, failovers):
        df.unpersist()
    out = {"bucket_us": bucket_us, "publishes_from": source}
    for _, r in _mean_rows(summary_pd).iterrows():
        out[r["variant"]] = {c: _num(r[c]) for c in churn.SUMMARY_COLUMNS}
    return out


def _summary(run_dir, scenario_meta, indices, meta_pd, groups_pd, options, dp_pd, rdp_pd,
             ns_pd, ls_pd, route_means, probes_pd) -> dict:
    nodes = int(meta_pd["n_hosts"].max())
    n_groups = int(groups_pd.groupby("topo").size().max()) if len(groups_pd) else 0
    summary = {
        "scenario": scenario_meta.get("scenario", run_dir.name.rsplit("-", 1)[0]),
        "nodes": scenario_meta.get("nodes", nodes),
        "groups": scenario_meta.get("groups", n_groups),
        "topologies": scenario_meta.get("topologies", len(indices)),
    }
    summary.update({k: v for k, v in scenario_meta.items() if k not in summary})

    def by_variant(df, build):
        return {r["variant"]: build(r) for _, r in _mean_rows(df).iterrows()}

    def pick(d: dict):
        if options.primary_variant in d:
            return d[options.primary_variant]
        return next(iter(d.values()), None)

    dp = by_variant(dp_pd, lambda r: {
        "groups": _num(r["groups"]),
        "rad": _stats(r, "rad_", ["mean", "median", "p90", "max"]),
        "rmd": _stats(r, "rmd_", ["mean", "median", "p90", "max"])})
    for v in dp.values():   # the key names: p50 = median
        for k in ("rad", "rmd"):
            v[k] = {"p50": v[k]["median"], "p90": v[k]["p90"], "max": v[k]["max"],
                    "mean": v[k]["mean"]}
    summary["delay_penalty"] = pick(dp)
    summary["delay_penalty_by_variant"] = dp
    rdp = by_variant(rdp_pd, lambda r: {
        **_stats(r, "", ["mean", "median", "p80", "p98", "frac_below_1", "max"]),
        "members": _num(r["members"])})
    summary["rdp_rank1"] = pick(rdp)
    summary["rdp_rank1_by_variant"] = rdp

    ns = {}
    for _, r in _mean_rows(ns_pd).iterrows():
        entry = ns.setdefault(r["variant"], {})
        figures_ = {"children_tables": _stats(r, "tables_", ["mean", "median", "max"]),
                    "children_entries": _stats(r, "entries_", ["mean", "median", "max"]),
                    "nodes": _num(r["nodes"])}
        if r["population"] == "all_nodes":
            entry.update(figures_)
        else:
            entry["tree_nodes"] = figures_
    summary["node_stress"] = ns
    summary["node_stress_population"] = "all_nodes (zeros included); tree_nodes: forwarders"

    ls = {}
    for _, r in _mean_rows(ls_pd).iterrows():
        entry = {k: _num(r[k]) for k in ("total", "mean", "median", "max", "links",
                                         "links_nonzero", "mean_all_links")}
        if isinstance(r["note"], str):
            entry["note"] = r["note"]
        ls[r["traffic"]] = entry
    order = [t.label for t in options.traffic] + list(BASELINES)
    summary["link_stress"] = {k: ls[k] for k in sorted(ls, key=lambda k: (
        order.index(k) if k in order else len(order), k))}

    overlay_ = {"mean_hops": _num(route_means["mean_hops"].mean()) if len(route_means) else None,
                "mean_hops_routes": int(route_means["full_routes"].fillna(0).sum())
                if len(route_means) else 0,
                "mean_hops_all_routes": _num(route_means["mean_hops_all"].mean())
                if len(route_means) else None,
                "routes": int(route_means["routes"].sum()) if len(route_means) else 0,
                "log16_nodes_ceil": math.ceil(math.log(max(nodes, 2), 16))}
    if len(probes_pd) and probes_pd["probes"].sum() > 0:
        overlay_["probes_per_join"] = _num(probes_pd["probes_per_join"].mean())
    summary["overlay"] = overlay_
    return summary


def _merge_and_write(path: Path, summary: dict, extra: dict) -> dict:
    merged: dict = {}
    if path.is_file():
        try:
            merged = json.loads(path.read_text())
        except json.JSONDecodeError:
            merged = {}
    for source in (summary, extra):
        for k, v in source.items():
            if isinstance(v, dict) and isinstance(merged.get(k), dict) and k == "timing":
                merged[k] = {**merged[k], **v}
            else:
                merged[k] = v
    # the key order first, extras after
    head = ["scenario", "nodes", "groups", "topologies", "delay_penalty", "rdp_rank1",
            "node_stress", "link_stress", "overlay", "churn", "timing"]
    ordered = {k: merged[k] for k in head if k in merged}
    ordered.update({k: v for k, v in merged.items() if k not in ordered})
    write_json(ordered, path)
    return json.loads(path.read_text())
