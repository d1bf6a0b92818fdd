"""`run_analysis`: every metric of a run directory, as CSVs, figures and summary.json.

Each section is one Spark job or a few (declarative plans whose per-row work is numpy
inside grouped maps, see the section modules) whose results are collected to the driver
with Arrow; the driver computes the summaries from the collected tables, writes every CSV
itself (`analysis.output.write_frame`) and the figures. All sections' jobs are submitted
together (Spark runs them on every executor core), the driver finishes the sections in
order as their results arrive; churn (only in churn runs) is the last section.
"""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis import churn, delay, figures, link_stress, node_stress, overlay, published, spread
from analysis.load import load_events, logged_topologies, parquet_rows, run_protocol
from analysis.output import write_frame, write_json
from analysis.physical import ship_topologies, topology_numbers, topology_path
from analysis.protocol import SCRIBE_CREATE, RunProtocol
from analysis.schema import BASELINES, AnalysisOptions, resolve_traffic
from analysis.stats import exact_mean, with_topology_mean

# Spark settings the analysis needs whatever session it is given (runtime-settable ones)
SESSION_CONF = {"spark.sql.execution.arrow.pyspark.enabled": "true",
                "spark.sql.execution.arrow.pyspark.fallback.enabled": "false"}


def topology_indices(run_dir: Path) -> list[int]:
    """Topology indices t with a RUN_DIR/topology/topo-<t>.npz file, ascending."""
    found = []
    for p in (run_dir / "topology").glob("topo-*.npz"):
        stem = p.name[len("topo-"):-len(".npz")]
        if stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def topology_meta(run_dir: Path, indices: list[int], reader=None) -> dict[int, dict]:
    """{topo: {n_links, n_hosts, lan_base, has_paths}} from the files' array headers."""
    return {t: topology_numbers(topology_path(run_dir, t), reader) for t in indices}


def executors_share_disk(options: AnalysisOptions) -> bool:
    """Whether Spark tasks can read the driver's run directory: the user said so
    (`shared_storage=True`), or the Ray cluster is this one machine (one node)."""
    if options.shared_storage is not None:
        return bool(options.shared_storage)
    import ray
    if not ray.is_initialized():
        return True
    return len([n for n in ray.nodes() if n.get("Alive")]) <= 1


def collect(df: DataFrame) -> pd.DataFrame:
    """A Spark result on the driver (Arrow)."""
    return df.toPandas()


def _num(v):
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    return v.item() if hasattr(v, "item") else v


def _stats(row: pd.Series, prefix: str, names: list[str]) -> dict:
    return {n: _num(row.get(f"{prefix}{n}")) for n in names}


def _mean_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["topo"] == "mean"]


def _buckets(keys: int, groups: int) -> int:
    """Buckets per group so that `groups` x buckets gives at least `keys` grouping keys."""
    return max(1, -(-keys // max(1, groups)))


class _Context:
    """What every section needs: session, logs, topology handles, output folders."""

    def __init__(self, spark, run_dir, refs, ev, files, meta, options, marks, events_root,
                 protocol: RunProtocol):
        self.spark, self.run_dir, self.refs, self.ev, self.files = spark, run_dir, refs, ev, files
        self.protocol = protocol   # the run's type table and pastry.b
        self.events_root = events_root     # where Parquet event logs are (run dir or storage)
        self.meta, self.options = meta, options
        self.marks = marks     # the paper's figures drawn over ours, if it has some
        # the grouped maps' keys are dealt out to the shuffle partitions in turn
        # (analysis.placement), so one key per partition leaves no core idle
        self.partitions = max(1, int(spark.conf.get("spark.sql.shuffle.partitions")))
        self.topologies = sorted(meta)
        partitions = self.partitions
        # group buckets of the delay and node-stress grouped maps: no more than that (each
        # delay call has a fixed cost, which many buckets multiply; each node-stress call
        # returns one row per node it sees, summed per topology)
        self.buckets = _buckets(partitions, len(meta))
        # link stress: every (topology, traffic, bucket) call returns one partial row per link
        # its packets touch (the LAN links of its members, most core links), which Spark then
        # sums: more buckets multiply those rows (the core links most of all: every bucket
        # touches most of them). The (topology, traffic) pairs already give ~6 groups per
        # topology, so groups are split into buckets only when there are fewer pairs than
        # partitions (a large cluster, few topologies); one bucket needs no sums at all.
        self.link_buckets = _buckets(partitions,
                                     len(meta) * (len(options.traffic) + len(BASELINES)))
        self.metrics, self.figs = run_dir / "metrics", run_dir / "figures"
        self.churn: dict | None = None      # the churn section's plan for its finish


def run_analysis(run_dir: str | Path, spark: SparkSession, refs: dict[str, list] | None = None,
                 scenario_meta: dict | None = None, extra: dict | None = None,
                 options: AnalysisOptions | None = None, events: str | None = None) -> dict:
    """Compute every metric of RUN_DIR and write metrics/*.csv, figures/*.png, summary.json.

    refs: optional {table: [emulator.storage.TableRef]} (the hand-off, emu.logs) used
    instead of the Parquet logs for those tables. events: where the Parquet logs are when
    not under RUN_DIR (a `run.storage` path or URI, read by the executors).
    scenario_meta: {"scenario", "nodes", "groups", ...} put at the top of the summary.
    extra: merged last into summary.json (e.g. "timing"; dicts are merged one level deep).
    An existing summary.json's keys are kept unless recomputed. Returns the summary dict.
    """
    started = time.perf_counter()
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"run directory {run_dir} does not exist")
    options = options or AnalysisOptions()
    indices = topology_indices(run_dir)
    if not indices:
        raise ValueError(f"no topology files in {run_dir / 'topology'} (expected topo-<t>.npz)")
    for k, v in SESSION_CONF.items():
        spark.conf.set(k, v)
    reader = options.topology_reader
    meta = topology_meta(run_dir, indices, reader)
    shared = executors_share_disk(options)
    files = ship_topologies(spark, run_dir, indices, reader, ship=not shared)
    events_root = str(events) if events is not None else run_dir
    named_storage = events is not None and Path(str(events)) != run_dir
    ev = load_events(spark, events_root, refs, hand_over=not (shared or named_storage))
    _check_logged_topologies(events_root, refs, ev, indices, run_dir)
    protocol = run_protocol(run_dir, events_root, refs)
    options = resolve_traffic(options, protocol)
    marks = published.figure_marks((scenario_meta or {}).get(
        "scenario", run_dir.name.rsplit("-", 1)[0]))
    ctx = _Context(spark, run_dir, refs, ev, files, meta, options, marks, events_root,
                   protocol)
    results, timing = _run_sections(ctx)
    files.release()
    churn_summary = results.pop("churn_summary")
    if churn_summary is None:
        timing.pop("churn")

    summary = _summary(run_dir, scenario_meta or {}, indices, meta, options,
                       routing_base=protocol.routing_base, **results)
    if churn_summary is not None:
        summary["churn"] = churn_summary
    summary["spread"] = spread.add_spread(ctx.metrics)   # std, 95 % CI across topologies
    timing["analysis_total"] = time.perf_counter() - started
    summary["timing"] = {f"analysis_{k}" if not k.startswith("analysis") else k: round(v, 3)
                         for k, v in timing.items()}
    return _merge_and_write(run_dir / "summary.json", summary, extra or {})


def _run_sections(ctx: _Context) -> tuple[dict, dict[str, float]]:
    """Every section's Spark jobs submitted at once (one driver thread each): the executors
    stay busy while the driver writes the previous section's CSVs and figures. A section's
    time runs from the end of the previous one until its outputs are written."""
    timing: dict[str, float] = {}
    results = {}
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="analysis") as pool:
        pending = [(name, finish, {k: pool.submit(collect, df) for k, df in plan(ctx).items()})
                   for name, plan, finish in SECTIONS]
        while pending:
            # taken off the list: a future holds its table, which then goes with the
            # section once it is written (the driver holds no section's tables but those
            # collected and not written yet)
            name, finish, futures = pending.pop(0)
            t0 = time.perf_counter()
            results.update(finish(ctx, {k: futures.pop(k).result() for k in list(futures)}))
            timing[name] = time.perf_counter() - t0
    return results, timing


def _check_logged_topologies(events_root, refs, ev, indices: list[int],
                             run_dir: Path) -> None:
    if refs and "host" in refs:
        logged = {r.topo for r in refs["host"]}
    else:
        logged = logged_topologies(events_root, "host")
    missing = sorted(logged - set(indices))
    if missing:
        raise ValueError(f"event logs name topology {missing[0]} but {run_dir}/topology/"
                         f"topo-{missing[0]}.npz is missing")


def _has_rows(events_root, refs, ev, table: str) -> bool:
    if refs and table in refs:
        return any(r.rows for r in refs[table])
    return parquet_rows(events_root, table) > 0


def _delay_plan(c: _Context) -> dict[str, DataFrame]:
    return {"rows": delay.delay_rows(c.ev["delivery"], c.ev["group"], c.files, c.buckets,
                                     c.topologies, c.partitions)}


def _delay_section(c: _Context, got: dict[str, pd.DataFrame]) -> dict:
    rows = got["rows"]
    by_group = delay.by_group_frame(rows)
    rdp = delay.rdp_frame(rows)
    dp_pd = delay.delay_penalty_summary(by_group)
    rdp_pd = delay.rdp_rank1_summary(rdp)
    write_frame(by_group, c.metrics / "delay_penalty_by_group.csv", ["topo", "variant", "group"])
    write_frame(rdp, c.metrics / "rdp_rank1.csv", ["topo", "variant", "member", "group"])
    write_frame(dp_pd, c.metrics / "delay_penalty_summary.csv", ["topo", "variant"])
    write_frame(rdp_pd, c.metrics / "rdp_rank1_summary.csv", ["topo", "variant"])
    figures.delay_penalty_cdf(by_group[["variant", "rad", "rmd"]],
                              c.figs / "delay_penalty_cdf.png", c.marks.get("delay_penalty_cdf"))
    figures.rdp_cdf(rdp[["variant", "rdp"]], c.figs / "rdp_rank1_cdf.png",
                    c.marks.get("rdp_rank1_cdf"))
    return {"dp_pd": dp_pd, "rdp_pd": rdp_pd}


def _node_plan(c: _Context) -> dict[str, DataFrame]:
    return {"stress": node_stress.node_stress_rows(c.ev["tree_edge"], c.ev["host"],
                                                   c.ev["membership"], c.topologies,
                                                   c.buckets, c.partitions)}


def _node_section(c: _Context, got: dict[str, pd.DataFrame]) -> dict:
    stress = got["stress"].astype({"topo": "int64", "node": "int64", "children_tables": "int64",
                            "children_entries": "int64"})
    ns_pd = node_stress.node_stress_summary(stress)
    hist = node_stress.node_stress_histogram(stress)
    write_frame(stress, c.metrics / "node_stress.csv", ["topo", "variant", "node"])
    write_frame(ns_pd, c.metrics / "node_stress_summary.csv",
                ["topo", "variant", "population"])
    write_frame(hist, c.metrics / "node_stress_histogram.csv",
                ["topo", "variant", "measure", "value"])
    figures.node_stress_distribution(hist, c.figs / "node_stress.png", c.marks)
    return {"ns_pd": ns_pd}


def _link_plan(c: _Context) -> dict[str, DataFrame]:
    return {"loads": link_stress.link_loads(c.ev["message"], c.ev["membership"],
                                            c.ev["group"], c.options.traffic, c.files,
                                            c.meta, c.link_buckets, c.partitions)}


def _link_section(c: _Context, got: dict[str, pd.DataFrame]) -> dict:
    loads = got["loads"]
    stress = link_stress.link_stress_frame(loads, c.meta)
    ls_pd = link_stress.link_stress_summary(loads, stress, c.meta)
    hist = link_stress.link_stress_histogram(stress)
    write_frame(stress, c.metrics / "link_stress.csv", ["topo", "traffic", "link"])
    write_frame(hist, c.metrics / "link_stress_histogram.csv", ["topo", "traffic", "stress"])
    write_frame(ls_pd, c.metrics / "link_stress_summary.csv", ["topo", "traffic"])
    if len(hist):
        figures.link_stress_distribution(hist, c.figs / "link_stress.png",
                                         c.marks.get("link_stress"))
    return {"ls_pd": ls_pd}


def _overlay_plan(c: _Context) -> dict[str, DataFrame]:
    ev = c.ev
    return {"routes": overlay.route_counts(ev["route"]),
            "counts": overlay.message_counts(ev["message"]),
            "probes": overlay.probe_counts(ev["probe"], ev["membership"]),
            "groups": overlay.group_table(ev["group"], ev["membership"])}


def _overlay_section(c: _Context, got: dict[str, pd.DataFrame]) -> dict:
    names = c.options.type_names
    routes, counts, probes = got["routes"], got["counts"], got["probes"]
    logged = c.protocol.names
    groups_pd = got["groups"].astype({"topo": "int64", "group": "int64", "members": "int64"})
    probes_pd = overlay.probes_per_join(probes)
    write_frame(overlay.overlay_hops_histogram(routes), c.metrics / "overlay_hops.csv",
                ["topo", "phase", "type", "hops"])
    write_frame(overlay.overlay_hops_summary(routes, logged, names),
                c.metrics / "overlay_hops_summary.csv", ["topo", "phase", "type"])
    write_frame(overlay.messages_by_type(counts, logged, names),
                c.metrics / "messages_by_type.csv", ["topo", "phase", "type"])
    write_frame(probes_pd, c.metrics / "probes.csv", ["topo"])
    write_frame(groups_pd, c.metrics / "groups.csv", ["topo", "rank", "group"])
    if len(groups_pd):
        figures.group_size_by_rank(groups_pd, c.figs / "group_size_by_rank.png")
    return {"groups_pd": groups_pd, "probes_pd": probes_pd,
            "route_means": overlay.route_means(routes, c.protocol.code(SCRIBE_CREATE))}


def churn_bucket_us(messages_span_us: int, requested: int | None) -> int:
    """Bucket width: the requested one, else 1/20 of the stream rounded up to whole ms."""
    if requested is not None:
        if requested <= 0:
            raise ValueError(f"churn_bucket_us must be positive, got {requested}")
        return int(requested)
    return max(1000, -(-max(int(messages_span_us), 1) // 20 // 1000) * 1000)


def _churn_plan(c: _Context) -> dict[str, DataFrame]:
    """The churn section's frames ({} when the run logged no stream and no failures, or its
    stream is empty); what its finish needs besides is kept in `c.churn`."""
    ev, options = c.ev, c.options
    c.churn = None
    if not (_has_rows(c.events_root, c.refs, ev, "publish")
            or _has_rows(c.events_root, c.refs, ev, "node_event")):
        return {}
    inferred = not _has_rows(c.events_root, c.refs, ev, "publish")
    messages = churn.published_messages(ev["publish"], ev["delivery"], inferred,
                                        options.churn_phases).cache()
    span = messages.agg(F.min("publish_time").alias("lo"),
                        F.max("publish_time").alias("hi")).first()
    if span["lo"] is None:
        messages.unpersist()
        return {}
    bucket_us = churn_bucket_us(span["hi"] - span["lo"], options.churn_bucket_us)
    delivery = ev["delivery"]
    if _has_rows(c.run_dir, c.refs, ev, "arrival"):
        # the reliable layer's raw tree arrivals, as a variant of their own beside what the
        # layer released (docs/analysis.md "Churn")
        tree = ev["arrival"].withColumn("variant",
                                        F.concat(F.col("variant"), F.lit(churn.TREE_SUFFIX)))
        delivery = delivery.unionByName(tree)
        logged = ev["arrival"].select("topo", "variant").distinct()   # variants with a layer
        tree_msgs = (messages.join(logged, ["topo", "variant"], "left_semi")
                     .withColumn("variant", F.concat(F.col("variant"), F.lit(churn.TREE_SUFFIX))))
        messages.unpersist()
        messages = messages.unionByName(tree_msgs).cache()
    dead = churn.dead_intervals(ev["node_event"]).cache()
    failures = churn.first_failures(ev["node_event"]).cache()
    arrivals = churn.first_arrivals(delivery, messages, options.churn_phases).cache()
    # every member pair's outcome once: the surviving members' and the died ones' are parts
    pairs = churn.delivery_outcomes(
        churn.member_deliveries(messages, ev["membership"], failures), arrivals).cache()
    outcomes = churn.expected_deliveries(pairs)
    died = churn.died_deliveries(pairs)
    surviving = churn.out_of_order(churn.surviving_arrivals(arrivals, failures))
    # each of these is collected and summed up in per_topo as well
    buckets = churn.churn_delivery(outcomes, surviving, messages, dead, bucket_us).cache()
    outages = churn.churn_outages(outcomes).cache()
    failovers = churn.churn_rp_failover(messages, arrivals, ev["group"], failures).cache()
    per_topo = churn.churn_summary(churn.delivery_summary(outcomes, buckets, died),
                                   outages, failovers)
    c.churn = {"bucket_us": bucket_us, "source": "delivery" if inferred else "publish",
               "cached": (messages, dead, failures, arrivals, pairs, buckets, outages,
                          failovers)}
    return {"buckets": buckets, "outages": outages, "failovers": failovers,
            "per_topo": per_topo}


def _churn_section(c: _Context, got: dict[str, pd.DataFrame]) -> dict:
    """Churn CSVs and figures; {"churn_summary": the summary.json entry, None when the run
    has no stream}."""
    if c.churn is None:
        return {"churn_summary": None}
    for df in c.churn["cached"]:
        df.unpersist()
    metrics, bucket_us, source = c.metrics, c.churn["bucket_us"], c.churn["source"]
    buckets_pd, outages_pd, failovers_pd = got["buckets"], got["outages"], got["failovers"]
    summary_pd = with_topology_mean(got["per_topo"], ["variant"], churn.SUMMARY_COLUMNS)
    summary_pd["publishes_from"] = source
    write_frame(_nullable_ints(buckets_pd), metrics / "churn_delivery.csv",
                ["topo", "variant", "bucket"])
    write_frame(_nullable_ints(outages_pd), metrics / "churn_outages.csv",
                ["topo", "variant", "group", "member", "start_us"])
    write_frame(_nullable_ints(failovers_pd), metrics / "churn_rp_failover.csv",
                ["topo", "variant", "group"])
    write_frame(summary_pd, metrics / "churn_summary.csv", ["topo", "variant"])
    if len(buckets_pd):
        figures.churn_delivery(buckets_pd, c.figs / "churn_delivery.png")
    if len(failovers_pd):
        figures.churn_failover(failovers_pd, c.figs / "churn_failover.png")
    out = {"bucket_us": bucket_us, "publishes_from": source}
    for _, r in _mean_rows(summary_pd).iterrows():
        out[r["variant"]] = {k: _num(r[k]) for k in churn.SUMMARY_COLUMNS}
    return {"churn_summary": out}


# churn last: its plan runs one small job (the stream's span) while the others' run
SECTIONS = (("delay_penalty", _delay_plan, _delay_section),
            ("node_stress", _node_plan, _node_section),
            ("link_stress", _link_plan, _link_section),
            ("overlay", _overlay_plan, _overlay_section),
            ("churn", _churn_plan, _churn_section))


_INTEGER_COLUMNS = {"topo", "bucket", "bucket_start_us", "bucket_end_us", "messages",
                    "expected", "received", "duplicates", "out_of_order", "max_delay_us",
                    "dead_nodes", "group", "member", "start_us", "last_missed_us", "missed",
                    "recovered_us", "duration_us", "rp", "failed_us", "messages_after",
                    "delivered_after", "first_delivered_us", "failover_us"}


def _nullable_ints(df: pd.DataFrame) -> pd.DataFrame:
    """Integer columns that came back as float (nulls) print as integers again."""
    return df.astype({c: "Int64" for c in df.columns if c in _INTEGER_COLUMNS})


def _summary(run_dir, scenario_meta, indices, meta, options, *, routing_base, groups_pd, dp_pd,
             rdp_pd, ns_pd, ls_pd, route_means, probes_pd) -> dict:
    nodes = max(int(m["n_hosts"]) for m in meta.values())
    n_groups = int(groups_pd.groupby("topo").size().max()) if len(groups_pd) else 0
    summary = {
        "scenario": scenario_meta.get("scenario", run_dir.name.rsplit("-", 1)[0]),
        "nodes": scenario_meta.get("nodes", nodes),
        "groups": scenario_meta.get("groups", n_groups),
        "topologies": scenario_meta.get("topologies", len(indices)),
    }
    summary.update({k: v for k, v in scenario_meta.items() if k not in summary})
    summary.update(_delay_summary(dp_pd, rdp_pd, options.primary_variant))
    summary["node_stress"] = _node_stress_summary(ns_pd)
    summary["node_stress_population"] = "all_nodes (zeros included); tree_nodes: forwarders"
    summary["link_stress"] = _link_stress_summary(ls_pd, options)
    summary["overlay"] = _overlay_summary(route_means, probes_pd, nodes, routing_base)
    return summary


def _by_variant(df: pd.DataFrame, build) -> dict:
    return {r["variant"]: build(r) for _, r in _mean_rows(df).iterrows()}


def _delay_summary(dp_pd: pd.DataFrame, rdp_pd: pd.DataFrame, primary: str) -> dict:
    """delay_penalty and rdp_rank1 (the primary variant's) and their by-variant tables."""
    def pick(d: dict):
        if primary in d:
            return d[primary]
        return next(iter(d.values()), None)

    dp = _by_variant(dp_pd, lambda r: {
        "groups": _num(r["groups"]),
        "rad": _stats(r, "rad_", ["mean", "median", "p90", "max"]),
        "rmd": _stats(r, "rmd_", ["mean", "median", "p90", "max"])})
    for v in dp.values():   # summary.json's documented key names: p50 = median
        for k in ("rad", "rmd"):
            v[k] = {"p50": v[k]["median"], "p90": v[k]["p90"], "max": v[k]["max"],
                    "mean": v[k]["mean"]}
    rdp = _by_variant(rdp_pd, lambda r: {
        **_stats(r, "", ["mean", "median", "p80", "p98", "frac_below_1", "max"]),
        "members": _num(r["members"])})
    return {"delay_penalty": pick(dp), "delay_penalty_by_variant": dp,
            "rdp_rank1": pick(rdp), "rdp_rank1_by_variant": rdp}


def _node_stress_summary(ns_pd: pd.DataFrame) -> dict:
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
    return ns


def _link_stress_summary(ls_pd: pd.DataFrame, options: AnalysisOptions) -> dict:
    ls = {}
    for _, r in _mean_rows(ls_pd).iterrows():
        entry = {k: _num(r[k]) for k in ("total", "mean", "median", "max", "links",
                                         "links_nonzero", "mean_all_links")}
        if isinstance(r["note"], str):
            entry["note"] = r["note"]
        ls[r["traffic"]] = entry
    order = [t.label for t in options.traffic] + list(BASELINES)
    return {k: ls[k] for k in sorted(ls, key=lambda k: (
        order.index(k) if k in order else len(order), k))}


def _overlay_summary(route_means: pd.DataFrame, probes_pd: pd.DataFrame, nodes: int,
                     routing_base: int | None) -> dict:
    """Hops per route against Pastry's bound: `log<2^b>_nodes_ceil` = ceil(log_{2^b} N) with
    the run's own b (config.toml; left out when the run directory does not say b)."""
    any_routes = len(route_means) > 0
    overlay_ = {"mean_hops": exact_mean(route_means["mean_hops"].to_numpy(float))
                if any_routes else None,
                "mean_hops_routes": int(route_means["full_routes"].sum()) if any_routes else 0,
                "mean_hops_all_routes": exact_mean(route_means["mean_hops_all"].to_numpy(float))
                if any_routes else None,
                "routes": int(route_means["routes"].sum()) if any_routes else 0}
    if routing_base is not None:
        overlay_[f"log{routing_base}_nodes_ceil"] = math.ceil(math.log(max(nodes, 2),
                                                                       routing_base))
    if len(probes_pd) and probes_pd["probes"].sum() > 0:
        overlay_["probes_per_join"] = exact_mean(probes_pd["probes_per_join"].to_numpy(float))
    return overlay_


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
    # the documented keys first, in their order (docs/analysis.md), extras after
    head = ["scenario", "nodes", "groups", "topologies", "delay_penalty", "rdp_rank1",
            "node_stress", "link_stress", "overlay", "churn", "timing"]
    ordered = {k: merged[k] for k in head if k in merged}
    ordered.update({k: v for k, v in merged.items() if k not in ordered})
    write_json(ordered, path)
    return json.loads(path.read_text())
