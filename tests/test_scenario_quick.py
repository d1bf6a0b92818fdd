"""The `quick` scenario end to end through Ray (engine shards) and Spark (RayDP analysis):
a complete run directory and plausible metrics (the session's reference run,
tests/runs.py: its exact equality across shard counts is tests/test_shard_invariance.py's,
its resume after an interruption tests/test_faults.py's), the churn scenarios' runs, and
bad input refused before anything is written.

Slow: the session's Ray and Spark; two churn runs with their analyses."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from runs import REFERENCE_GROUPS, REFERENCE_NODES, reference_config, summary
from scenarios import ScenarioError, load_scenario, run_scenario
from scenarios import runner as runner_mod
from scenarios.groups import zipf_sizes

pytestmark = pytest.mark.slow

FIGURES = ["delay_penalty_cdf.png", "rdp_rank1_cdf.png", "node_stress.png", "link_stress.png",
           "group_size_by_rank.png"]
CSVS = ["delay_penalty_by_group.csv", "delay_penalty_summary.csv", "rdp_rank1.csv",
        "rdp_rank1_summary.csv", "node_stress.csv", "node_stress_summary.csv",
        "node_stress_histogram.csv", "link_stress.csv", "link_stress_summary.csv",
        "link_stress_histogram.csv", "overlay_hops.csv", "overlay_hops_summary.csv",
        "messages_by_type.csv", "probes.csv", "groups.csv"]
NODES, GROUPS = REFERENCE_NODES, REFERENCE_GROUPS


@pytest.fixture
def runs(reference_runs) -> dict[int, Path]:
    return reference_runs


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_run_directory_is_complete(runs):
    d = runs[2]
    for name in ("COMPLETE", "config.toml", "run.log", "summary.json", "report.md",
                 "topology/topo-0.npz"):
        assert (d / name).is_file(), name
    for f in FIGURES:
        assert (d / "figures" / f).stat().st_size > 1000, f
    for f in CSVS:
        assert (d / "metrics" / f).is_file(), f
    for table in ("message", "route", "delivery", "tree_edge", "group", "membership", "host"):
        assert list((d / "events" / table / "topo=0").glob("*.parquet")), table
    for phase in load_scenario("quick").phase_order:
        assert (d / "checkpoints" / phase / "driver.json").is_file(), phase
    # the resolved config reproduces the run's configuration
    assert load_scenario(str(d / "config.toml")) == reference_config(2)
    assert "phase multicast_collapsed" in (d / "run.log").read_text()


def test_summary_is_plausible(runs):
    s = summary(runs[2])
    assert (s["scenario"], s["nodes"], s["groups"]) == ("quick", NODES, GROUPS)
    for variant in ("scribe", "collapsed"):
        assert s["delay_penalty_by_variant"][variant]["groups"] == GROUPS
    by_group = [r for r in rows(runs[2] / "metrics" / "delay_penalty_by_group.csv")
                if r["topo"] != "mean"]
    rad = np.array([float(r["rad"]) for r in by_group])
    rmd = np.array([float(r["rmd"]) for r in by_group])
    assert len(rad) == 2 * GROUPS
    assert (rad >= 0.95).mean() >= 0.9 and (rmd >= 0.95).mean() >= 0.9
    assert 1.0 < np.median(rad) < 4.0
    ns = s["node_stress"]["scribe"]
    assert ns["children_entries"]["mean"] > 0 and ns["children_tables"]["max"] >= 1
    # collapse removes forwarders: fewer tree nodes, never more entries than there were
    assert ns["tree_nodes"]["nodes"] > s["node_stress"]["collapsed"]["tree_nodes"]["nodes"]
    ls = s["link_stress"]
    assert ls["scribe"]["total"] >= ls["ip_multicast"]["total"] > 0
    assert ls["collapsed"]["total"] <= ls["scribe"]["total"]
    assert ls["scribe_join"]["total"] == ls["scribe"]["total"]       # symmetry (SPEC 5)
    largest = int(zipf_sizes(NODES, GROUPS)[0])
    assert ls["naive_unicast"]["max"] >= largest - 1     # the source sends to all others
    assert 0 < s["overlay"]["mean_hops"] <= s["overlay"]["log16_nodes_ceil"]
    for k in ("phase_join", "phase_multicast", "phase_collapse", "emulation_total",
              "analysis_total"):
        assert s["timing"][k] > 0, k
    # the whole run's wall time covers emulation, the wait for Spark and the analysis (Spark
    # may start beside the emulation: scenarios/analysis_spark.py)
    t = s["timing"]
    waited = t.get("spark_wait", 0.0) + t["spark_start"] * ("spark_warmup" not in t)
    assert t["total"] >= t["emulation_total"] + waited + t["analysis_total"] - 0.01
    assert t["total"] >= t["spark_start"]
    assert s["emulation"]["lost_messages"] == 0


def test_bad_output_directory_and_resume_target(session, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(ScenarioError, match="exists and is not empty"):
        run_scenario(reference_config(1), out=busy, progress=False)
    with pytest.raises(ScenarioError, match="no config.toml"):
        run_scenario(None, resume=tmp_path, progress=False)


CHURN_SETS = ["churn.duration_us=6000000", "churn.fail_rate_per_s=3.0",
              "churn.downtime_us=2000000", "churn.warmup_us=1000000",
              "churn.multicast_interval_us=500000", "phases.settle_us=3000000",
              "churn.rp_failures=1"]
# reliable: 2 RPs fail for good (2.5-3 s before the stream ends); the run must go on until
# the slowest fail-over has brought every message through: here the last release comes
# 9.3 s after the last publish (RP failure detection, repair JOINs that Pastry still routes
# to the dead RP until a hop-ack timeout, 1.3-1.5 s links: docs/scribe.md). With 8 s, 47
# deliveries were still on the wire when the run stopped (ratio 0.9964)
RELIABLE_SETS = ["churn.rp_failures=2", "phases.settle_us=12000000"]


@pytest.mark.parametrize("name", ["churn", "churn_reliable"])
def test_churn_runs_and_logs_deliveries(session, tmp_path, name, monkeypatch):
    """Both churn scenarios run and log their streams; the churn analysis of a real run is
    checked against its logs on the reliable one (the plain run's figures come from the
    same section: test_analysis_churn.py checks it on hand-built logs without the layer)."""
    sets = CHURN_SETS + (RELIABLE_SETS if name == "churn_reliable" else [])
    if name == "churn":
        monkeypatch.setattr(runner_mod, "_analyse", lambda *a, **k: {})
        monkeypatch.setattr(runner_mod, "_record_total", lambda *a, **k: None)
    # the plain run crosses shards; the reliable one, long in virtual time and sparse, runs
    # on one (its layer across shards: test_scribe_reliable.py)
    shards = 1 if name == "churn_reliable" else 2
    c = load_scenario(name, nodes=500, groups=8, shards=shards, sets=sets)
    d = run_scenario(c, out=tmp_path / name, progress=False)
    assert (d / "COMPLETE").is_file()
    ev = d / "events"
    pub = pq.read_table(ev / "publish").to_pandas()
    nev = pq.read_table(ev / "node_event").to_pandas()
    dl = pq.read_table(ev / "delivery").to_pandas()
    dl = dl[dl["phase"] == "churn"]
    assert len(pub) == 8 * 12 and set(nev["event"]) <= {"fail", "recover"}
    assert (nev["event"] == "fail").sum() >= 5
    # sources never fail, so every message leaves its source; most members get most of it
    assert set(map(tuple, pub[["group", "time"]].to_numpy())) >= set(
        map(tuple, dl[["group", "publish_time"]].drop_duplicates().to_numpy()))
    members = pq.read_table(ev / "membership").to_pandas().groupby("group").size()
    expected = sum(int(members[g]) - 1 for g in pub["group"])
    assert len(dl) > 0.7 * expected
    if name == "churn":          # no analysis, no summary.json: what the runner recorded
        state = json.loads((d / "state.json").read_text())
        assert state["counters"]["0"]["counts"].get("pastry_presumed_failed", 0) > 0
        assert state["timing"]["phase_churn"] > 0
        return
    s = summary(d)
    assert s["emulation"]["counters"].get("pastry_presumed_failed", 0) > 0
    assert s["timing"]["phase_churn"] > 0
    # the analysis' churn section: the stream the logs hold, member by member
    c = s["churn"]["scribe"]
    assert c["messages"] == len(pub)
    failed = set(nev.loc[nev["event"] == "fail", "node"])
    scribe = dl[(dl["variant"] == "scribe") & ~dl["member"].isin(failed)
                & (dl["member"] != dl["source"])]
    received = len(scribe[["group", "member", "publish_time"]].drop_duplicates())
    assert c["received"] == received > 0   # first arrivals at members never failed, but
    #                                        the source's own copy
    assert c["expected"] >= c["received"] and c["ratio"] == c["received"] / c["expected"]
    # ordered delivery: per (group, member) seqnos are released in increasing order,
    # each once (messages released together after a repair share one time)
    for _, g in dl.sort_values(["time", "seqno"]).groupby(["group", "member"]):
        assert (np.diff(g["seqno"].to_numpy()) > 0).all()
    # the guarantee through RP fail-overs: every expected message, once, in
    # publish order, at every surviving member (as in results/churn_reliable_oracle and on the
    # harness, test_scribe_reliable_failover.py)
    r = s["churn"]["scribe"]
    assert r["rp_failures"] >= 2 and r["rp_failovers"] == r["rp_failures"]
    assert (r["out_of_order"], r["duplicates"]) == (0, 0), r
    assert r["received"] == r["expected"] and r["ratio"] == 1.0, r
    assert r["expected"] > 0.9 * expected


def test_bad_topology_file_fails_cleanly_without_a_run_dir(session, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,1.0\nb,c,oops\n")
    c = load_scenario("quick", nodes=50, groups=3, shards=1, sets=[f"topology.source=edges:{bad}"])
    out = tmp_path / "run"
    with pytest.raises(ScenarioError, match=r"topology 'edges:.*bad\.csv'.*oops") as e:
        run_scenario(c, out=out, progress=False)
    assert "\n" not in str(e.value)
    assert not out.exists()          # nothing half-written is left behind
