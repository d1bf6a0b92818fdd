"""Analysis on a real RayDP/Spark session, checked against hand-computed metrics."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import test_analysis_helpers as hand
from analysis.physical import core_pair_loads, core_union_counts
from analysis.schema import AnalysisOptions

OPTIONS = AnalysisOptions(topology_reader=hand.read_hand_topology)


def test_core_expansion_by_hand():
    topo = hand.HandTopology(hand.EDGES, hand.DELAYS, hand.HOST_ROUTER)
    assert topo.route_links([2], [3])[1].tolist() == [3, 4]       # r2 -> r1 -> r3
    loads = core_pair_loads(topo, np.array([0, 2, 1]), np.array([2, 3, 1]), np.array([2, 1, 5]))
    assert loads.tolist()[:6] == [2, 0, 2, 1, 1, 0] and loads[6:].sum() == 0
    # tree 0: r0 -> {r1, r2, r3, r3}; tree 1: r2 -> {r1}; the union counts each link once
    counts = core_union_counts(topo, np.array([0, 0, 0, 0, 1]), np.array([0, 0, 0, 0, 2]),
                               np.array([1, 2, 3, 3, 1]))
    assert counts.tolist()[:6] == [1, 0, 1, 1, 1, 0] and counts[6:].sum() == 0


def test_core_expansion_refuses_latency_matrix():
    topo = hand.HandTopology(hand.EDGES, hand.DELAYS, hand.HOST_ROUTER, has_paths=False)
    with pytest.raises(ValueError, match="no physical paths"):
        core_pair_loads(topo, np.array([0]), np.array([1]), np.array([1]))
    with pytest.raises(ValueError, match="no physical paths"):
        core_union_counts(topo, np.array([0]), np.array([0]), np.array([1]))


@pytest.fixture(scope="module")
def hand_run(spark, tmp_path_factory):
    from analysis import run_analysis

    run_dir = hand.write_hand_run(tmp_path_factory.mktemp("run") / "hand-20250101")
    summary = run_analysis(run_dir, spark, options=OPTIONS, extra={"timing": {"join": 1.5}})
    return run_dir, summary


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


pytestmark_spark = pytest.mark.slow   # Spark start-up (~15 s) + one analysis per session


@pytestmark_spark
def test_load_refs_through_raydp(spark):
    import pyarrow as pa
    import ray

    from analysis.load import load_refs
    from emulator.storage import TableRef, ipc_bytes

    def ref(tbl):
        return TableRef(ray.put(ipc_bytes(tbl)), tbl.schema, tbl.num_rows)

    tbl = pa.table({"phase": ["join"] * 3, "group": pa.array([0, 0, 1], pa.int32()),
                    "member": pa.array([1, 2, 3], pa.int32()), "topo": pa.array([0, 0, 0])})
    # a second writer's types differ (int64 member): read per schema, conformed, unioned
    other = pa.table({"phase": ["join"], "group": pa.array([2], pa.int32()),
                      "member": pa.array([4], pa.int64()), "topo": pa.array([1], pa.int32())})
    df = load_refs(spark, [ref(tbl), ref(other)], "membership")
    assert df.columns == ["phase", "group", "member", "topo"]
    assert sorted((r["topo"], r["member"]) for r in df.collect()) == [(0, 1), (0, 2), (0, 3),
                                                                      (1, 4)]
    with pytest.raises(ValueError, match="lacks column"):
        load_refs(spark, [ref(tbl.drop(["member"]))], "membership")


@pytestmark_spark
def test_delay_penalty_by_hand(hand_run):
    run_dir, summary = hand_run
    rows = {int(r["group"]): r for r in read_csv(run_dir / "metrics/delay_penalty_by_group.csv")}
    assert set(rows) == {0, 1}
    assert float(rows[0]["rad"]) == pytest.approx(57 / 53, rel=1e-12)
    assert float(rows[0]["rmd"]) == pytest.approx(24 / 22, rel=1e-12)
    assert float(rows[1]["rad"]) == pytest.approx(51 / 19, rel=1e-12)
    assert float(rows[1]["rmd"]) == pytest.approx(2.0, rel=1e-12)
    assert int(rows[0]["members"]) == 4 and int(rows[0]["rank"]) == 1
    rad = summary["delay_penalty"]["rad"]
    assert rad["p50"] == pytest.approx((57 / 53 + 51 / 19) / 2)
    assert rad["max"] == pytest.approx(51 / 19)
    assert rad["p90"] == pytest.approx(57 / 53 + 0.9 * (51 / 19 - 57 / 53))


@pytestmark_spark
def test_rdp_rank1_by_hand(hand_run):
    run_dir, summary = hand_run
    rows = read_csv(run_dir / "metrics/rdp_rank1.csv")
    rdp = sorted(float(r["rdp"]) for r in rows)
    assert rdp == pytest.approx(sorted([1.0, 1.0, 24 / 22, 19 / 17]))
    s = summary["rdp_rank1"]
    assert s["mean"] == pytest.approx((2 + 24 / 22 + 19 / 17) / 4)
    assert s["median"] == pytest.approx((1 + 24 / 22) / 2)   # 1, 1, 24/22, 19/17
    assert s["frac_below_1"] == 0.0


@pytestmark_spark
def test_node_stress_by_hand(hand_run):
    run_dir, summary = hand_run
    rows = read_csv(run_dir / "metrics/node_stress.csv")
    got = {(r["variant"], int(r["node"])): (int(r["children_tables"]), int(r["children_entries"]))
           for r in rows}
    assert len(got) == 12   # 6 nodes x 2 variants, zeros included
    assert [got[("scribe", n)] for n in range(6)] == [(1, 2), (0, 0), (1, 2), (1, 1), (1, 1),
                                                      (0, 0)]
    assert [got[("collapsed", n)] for n in range(6)] == [(1, 2), (0, 0), (1, 2), (1, 2), (0, 0),
                                                         (0, 0)]
    ns = summary["node_stress"]["scribe"]
    assert ns["children_tables"] == {"mean": pytest.approx(4 / 6), "median": 1.0, "max": 1.0}
    assert ns["children_entries"] == {"mean": 1.0, "median": 1.0, "max": 2.0}
    assert ns["tree_nodes"]["children_entries"]["mean"] == 1.5


@pytestmark_spark
def test_link_stress_by_hand(hand_run):
    run_dir, summary = hand_run
    rows = read_csv(run_dir / "metrics/link_stress.csv")
    per = {}
    for r in rows:
        per.setdefault(r["traffic"], {})[int(r["link"])] = int(r["stress"])
    assert per["scribe"] == {0: 1, 2: 2, 3: 1, 4: 2, 5: 1, 6: 2, 9: 1, 10: 2, 11: 1, 12: 1,
                             13: 1, 14: 1, 15: 2, 17: 1}
    assert per["ip_multicast"] == {0: 1, 2: 1, 3: 1, 4: 2, 6: 1, 9: 1, 11: 1, 12: 1, 13: 1,
                                   15: 2, 17: 1}
    assert per["naive_unicast"] == {0: 3, 2: 1, 3: 1, 4: 2, 6: 4, 9: 1, 11: 1, 12: 2, 13: 1,
                                    15: 2, 17: 1}
    assert per["scribe_join"] == {7: 1, 8: 1}
    kinds = {(int(r["link"]), r["kind"]) for r in rows if r["traffic"] == "scribe"}
    assert (0, "core") in kinds and (6, "lan_up") in kinds and (9, "lan_down") in kinds
    ls = summary["link_stress"]
    assert ls["scribe"] == {"total": 19.0, "mean": pytest.approx(19 / 14), "median": 1.0,
                            "max": 2.0, "links": 18.0, "links_nonzero": 14.0,
                            "mean_all_links": pytest.approx(19 / 18)}
    assert ls["ip_multicast"]["total"] == 13 and ls["ip_multicast"]["links_nonzero"] == 11
    assert ls["naive_unicast"]["total"] == 19 and ls["naive_unicast"]["max"] == 4
    hist = read_csv(run_dir / "metrics/link_stress_histogram.csv")
    scribe_hist = {int(r["stress"]): int(r["links"]) for r in hist if r["traffic"] == "scribe"}
    assert scribe_hist == {1: 9, 2: 5}


@pytestmark_spark
def test_overlay_and_counts_by_hand(hand_run):
    run_dir, summary = hand_run
    # Pastry's mean is taken over CREATE routes only (here one, from the root itself)
    assert summary["overlay"]["mean_hops"] == 0.0
    assert summary["overlay"]["mean_hops_routes"] == 1
    assert summary["overlay"]["mean_hops_all_routes"] == pytest.approx(1.5)
    assert summary["overlay"]["probes_per_join"] == pytest.approx(2 / 6)
    by_type = {(r["phase"], r["type_name"]): int(r["messages"])
               for r in read_csv(run_dir / "metrics/messages_by_type.csv")}
    assert by_type == {("multicast", "scribe_data"): 6, ("multicast", "scribe_join_ack"): 1,
                       ("join", "scribe_join"): 1, ("maintenance", "test_ping"): 2,
                       ("maintenance", "pastry_row_req"): 1, ("maintenance", "reliable_95"): 1}


@pytestmark_spark
def test_summary_keys_and_merge(hand_run):
    run_dir, summary = hand_run
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert on_disk == summary
    for key in ("scenario", "nodes", "groups", "topologies", "delay_penalty", "rdp_rank1",
                "node_stress", "link_stress", "overlay", "timing"):
        assert key in summary
    assert (summary["scenario"], summary["nodes"], summary["groups"],
            summary["topologies"]) == ("hand", 6, 2, 1)
    assert summary["timing"]["join"] == 1.5 and summary["timing"]["analysis_total"] > 0
    assert set(summary["rdp_rank1"]) >= {"mean", "median", "p80", "p98", "frac_below_1"}


CSV_HEADERS = {
    "delay_penalty_by_group.csv": "topo,variant,group,rank,size,members,mean_scribe_us,"
                                  "mean_ip_us,max_scribe_us,max_ip_us,rad,rmd",
    "delay_penalty_summary.csv": "topo,variant,groups,rad_mean,rad_median,rad_max,rad_p90,"
                                 "rmd_mean,rmd_median,rmd_max,rmd_p90",
    "rdp_rank1.csv": "topo,variant,group,member,scribe_us,ip_us,rdp",
    "rdp_rank1_summary.csv": "topo,variant,members,mean,median,max,p80,p98,frac_below_1",
    "node_stress.csv": "topo,variant,node,children_tables,children_entries",
    "node_stress_summary.csv": "topo,variant,population,nodes,tables_mean,tables_median,"
                               "tables_max,entries_mean,entries_median,entries_max",
    "node_stress_histogram.csv": "topo,variant,measure,value,nodes",
    "link_stress.csv": "topo,traffic,link,kind,stress",
    "link_stress_histogram.csv": "topo,traffic,stress,links",
    "link_stress_summary.csv": "topo,traffic,total,mean,median,max,links,links_nonzero,"
                               "mean_all_links,note",
    "overlay_hops.csv": "topo,phase,type,hops,routes",
    "overlay_hops_summary.csv": "topo,phase,type,type_name,routes,mean_hops,max_hops,"
                                "mean_path_us",
    "messages_by_type.csv": "topo,phase,type,type_name,messages",
    "probes.csv": "topo,probes,nodes_probing,joins,probes_per_join",
    "groups.csv": "topo,group,rank,size,rp,members",
}


def spread_header(header: str, keys: int) -> str:
    """A summary CSV's header: its figures, then <figure>_std/_ci95_low/_ci95_high of each
    (analysis/spread.py; the first `keys` columns are topo and the key columns)."""
    figs = [c for c in header.split(",")[keys:] if c != "note"]
    return header + "".join(f",{c}_{s}" for c in figs for s in ("std", "ci95_low", "ci95_high"))


SPREAD_KEYS = {"delay_penalty_summary.csv": 2, "rdp_rank1_summary.csv": 2,
               "node_stress_summary.csv": 3, "link_stress_summary.csv": 2}


@pytestmark_spark
def test_csv_headers_and_files(hand_run):
    run_dir, _ = hand_run
    for name, header in CSV_HEADERS.items():
        lines = (run_dir / "metrics" / name).read_text().splitlines()
        if name in SPREAD_KEYS:
            header = spread_header(header, SPREAD_KEYS[name])
        assert lines[0] == header, name
    assert sorted(p.name for p in (run_dir / "metrics").iterdir()) == sorted(CSV_HEADERS)
    for fig in ("delay_penalty_cdf.png", "rdp_rank1_cdf.png", "node_stress.png",
                "link_stress.png", "group_size_by_rank.png"):
        assert (run_dir / "figures" / fig).stat().st_size > 5000


@pytestmark_spark
def test_report(hand_run):
    from analysis.report import write_report

    run_dir, _ = hand_run
    md, html = write_report(run_dir)
    text = md.read_text()
    assert "RAD" in text and "figures/link_stress.png" in text and 'scenario = "hand"' in text
    assert "data:image/png;base64," in html.read_text()


@pytestmark_spark
def test_latency_matrix_has_no_link_stress(spark, tmp_path):
    from analysis import run_analysis

    run_dir = hand.write_hand_run(tmp_path / "matrix-1", has_paths=False)
    summary = run_analysis(run_dir, spark, options=OPTIONS)
    for label in ("scribe", "ip_multicast", "naive_unicast"):
        entry = summary["link_stress"][label]
        assert entry["total"] is None and entry["max"] is None and "not available" in entry["note"]
    assert len(read_csv(run_dir / "metrics/link_stress.csv")) == 0
    # delays do not need paths
    assert summary["delay_penalty"]["rmd"]["max"] == pytest.approx(2.0)


@pytestmark_spark
def test_a_run_unlike_the_usual_in_form_gives_its_figures(spark, tmp_path, hand_run):
    """One analysis of the hand run changed in three ways the figures must not see, each
    taking another path through the analysis; every figure is the usual run's:

    - no host rows: node stress counts every node its edges and memberships name (its
      members then travel to the kernel; with host rows they do not): here all six, the
      same figures as with the host table (the plan with the anti-join runs end to end);
    - renumbered Scribe types and another b: the analysis reads both from the run (type
      table, config.toml), so every traffic figure is the one of the usual numbering;
    - a hop in two traffic selections loads the links of both (the array-and-explode path;
      the default selections are disjoint and take the one-CASE path): `again` repeats
      `scribe`."""
    import shutil
    from dataclasses import replace

    from analysis import run_analysis
    from analysis.schema import DEFAULT_TRAFFIC, Traffic

    codes = {"scribe_create": 160, "scribe_join": 161, "scribe_join_ack": 162,
             "scribe_mcast": 166, "scribe_data": 168}
    run_dir = hand.write_hand_run(tmp_path / "unlike-1", scribe_codes=codes, pastry_b=3)
    shutil.rmtree(run_dir / "events" / "host")
    scribe = next(t for t in DEFAULT_TRAFFIC if t.label == "scribe")
    options = replace(OPTIONS, traffic=(*DEFAULT_TRAFFIC, Traffic("again", scribe.phases,
                                                                  scribe.types)))
    summary = run_analysis(run_dir, spark, options=options)
    usual_dir, usual = hand_run
    # no host rows
    assert summary["node_stress"] == usual["node_stress"]
    assert (read_csv(run_dir / "metrics/node_stress.csv")
            == read_csv(usual_dir / "metrics/node_stress.csv"))
    # renumbered types, b = 3
    again = summary["link_stress"].pop("again")
    assert summary["link_stress"] == usual["link_stress"]
    for key in ("mean_hops", "mean_hops_routes", "mean_hops_all_routes", "routes"):
        assert summary["overlay"][key] == usual["overlay"][key]
    assert summary["overlay"]["log8_nodes_ceil"] == 1           # ceil(log_8 6), b = 3
    assert "log16_nodes_ceil" not in summary["overlay"]
    assert usual["overlay"]["log16_nodes_ceil"] == 1            # ceil(log_16 6), b = 4
    names = [(r["phase"], r["type_name"], r["messages"])
             for r in read_csv(run_dir / "metrics/messages_by_type.csv")]
    assert names == [(r["phase"], r["type_name"], r["messages"])
                     for r in read_csv(usual_dir / "metrics/messages_by_type.csv")]
    # the overlapping selection
    assert again == usual["link_stress"]["scribe"]
    rows = read_csv(run_dir / "metrics/link_stress.csv")
    again_rows = {r["link"]: r["stress"] for r in rows if r["traffic"] == "again"}
    assert again_rows and again_rows == {r["link"]: r["stress"] for r in rows
                                         if r["traffic"] == "scribe"}
    usual_rows = read_csv(usual_dir / "metrics/link_stress.csv")
    assert [r for r in rows if r["traffic"] != "again"] == usual_rows


@pytestmark_spark
def test_bad_input_is_refused(spark, tmp_path):
    from analysis import run_analysis

    with pytest.raises(ValueError, match="no topology files"):
        (tmp_path / "empty").mkdir()
        run_analysis(tmp_path / "empty", spark, options=OPTIONS)


@pytest.mark.slow
def test_a_cancelled_collect_raises_without_a_console_warning(spark):
    """The warm-up beside the emulation is stopped by cancelling its Spark jobs; pyspark's
    toPandas then warns with the whole Java trace before it raises, which lands on the
    console of a run that did nothing wrong (CI saw it). The error must still raise; the
    warning must not show (runtime/ray_spark.py filters it)."""
    import threading
    import time
    import warnings

    import pandas as pd

    def slow(batches):
        for b in batches:
            time.sleep(30)      # the job is cancelled long before this ends
            yield pd.DataFrame({"id": b["id"]})

    outcome = {}

    def collect():
        try:
            spark.range(0, 4, numPartitions=1).mapInPandas(slow, "id long").toPandas()
            outcome["error"] = None
        except Exception as exc:  # noqa: BLE001 - what matters is that one is raised
            outcome["error"] = exc

    from runtime.ray_spark import quiet_pyspark_warnings

    with warnings.catch_warnings(record=True) as shown:   # keeps the filters in force
        # what importing runtime.ray_spark did; pytest dropped it after the test that
        # imported it (each test runs in a catch_warnings block of its own)
        quiet_pyspark_warnings()
        worker = threading.Thread(target=collect)
        worker.start()
        deadline = time.monotonic() + 25    # well before the first batch's sleep ends
        while worker.is_alive() and time.monotonic() < deadline:
            time.sleep(1)                   # as SparkWarmup.finish: cancel until it stops
            spark.sparkContext.cancelAllJobs()
        worker.join(60)
    assert not worker.is_alive()
    assert outcome["error"] is not None and "cancel" in str(outcome["error"]).lower()
    assert not [w for w in shown if "toPandas" in str(w.message)], [str(w.message)[:200]
                                                                   for w in shown]
