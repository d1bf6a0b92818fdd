"""Churn metrics on a hand-made multicast stream with failures, every figure derived by hand.

Stream: 6 messages k = 0..5 published at T(k) = 1.0 s + k * 0.1 s to two groups, variants
"scribe" (plain) and "reliable".
- group 0: RP/source 0, members 1, 2, 3. Node 2 is dead from 1.25 s to 1.45 s, so it is
  expected at k = 0, 1, 2, 5. scribe: member 1 gets all (k1 twice, k4 after k5), member 3
  misses k2, k3, member 2 gets k0..k2 and misses k5.
- group 1: RP 4, source 7, members 5, 6. The RP dies at 1.15 s for good. scribe: k2, k3
  reach nobody; k4 reaches member 5 only; k5 both.
- reliable: every expected delivery arrives; group 1's k2, k3 late (300 ms). Its raw tree
  arrivals (`arrival`, variant "reliable:tree") differ at member 5 of group 1: k4 and k5
  came before the retransmitted k2, k3 (2 out of order) and k2 came twice (1 duplicate).
Node 2 failed: it is a member that died (counted apart, expected k0..k2, published before
its failure); the surviving members are 1, 3 (group 0) and 5, 6 (group 1).
Buckets of 200 ms: {k0, k1}, {k2, k3}, {k4, k5}.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis import churn
from analysis.load import load_events
from analysis.run import churn_bucket_us

T = {k: 1_000_000 + k * 100_000 for k in range(6)}
GROUPS = {0: {"rp": 0, "source": 0, "members": [1, 2, 3]},
          1: {"rp": 4, "source": 7, "members": [5, 6]}}
NODE_EVENTS = [(2, 1_250_000, "fail"), (2, 1_450_000, "recover"), (4, 1_150_000, "fail")]


def scribe_deliveries():
    """(group, member, k, delay_us) rows of the plain variant."""
    rows = [(0, 1, k, 10_000) for k in range(6) if k != 4] + [(0, 1, 4, 150_000)]
    rows.append((0, 1, 1, 60_000))                                   # duplicate of k1
    rows += [(0, 3, k, 10_000) for k in (0, 1, 4, 5)]
    rows += [(0, 2, k, 10_000) for k in (0, 1, 2)]
    rows += [(1, 5, k, 10_000) for k in (0, 1, 4, 5)]
    rows += [(1, 6, k, 10_000) for k in (0, 1, 5)]
    return rows


def reliable_arrivals():
    """(group, member, k, delay_us) tree arrivals of the reliable variant: the deliveries,
    but member 5 of group 1 got k4, k5 before k2, k3 and k2 twice."""
    early = {4: 10_000, 5: 10_000}
    rows = [r if (r[0], r[1]) != (1, 5) else (1, 5, r[2], early.get(r[2], r[3]))
            for r in reliable_deliveries()]
    return rows + [(1, 5, 2, 350_000)]


def reliable_deliveries():
    rows = [(0, m, k, 20_000) for m in (1, 3) for k in range(6)]
    rows += [(0, 2, k, 20_000) for k in (0, 1, 2, 5)]
    # group 1's k2, k3 are retransmitted after the repair; k4, k5 wait for them (in order)
    late = {2: 300_000, 3: 300_000, 4: 250_000, 5: 160_000}
    rows += [(1, m, k, late.get(k, 20_000)) for m in (5, 6) for k in range(6)]
    return rows


def _write(run_dir, table, phase, columns, types):
    out = run_dir / "events" / table / "topo=0"
    out.mkdir(parents=True, exist_ok=True)
    n = len(next(iter(columns.values())))
    arrays = {"phase": pa.array([phase] * n, pa.string())}
    arrays.update({c: pa.array(v, types[c]) for c, v in columns.items()})
    pq.write_table(pa.table(arrays), out / f"{phase}-shard0.parquet")


I8, I4, I2, S = pa.int64(), pa.int32(), pa.int16(), pa.string()


def write_churn_run(run_dir, with_publish=True, with_arrivals=False):
    from topologies import make_topology

    (run_dir / "topology").mkdir(parents=True)
    topo = make_topology("ts600", 1, 8)
    topo.save(run_dir / "topology" / "topo-0.npz")
    _write(run_dir, "host", "setup", {"node": list(range(8)),
                                      "router": topo.host_router.tolist(),
                                      "id_hex": [f"{i:032x}" for i in range(8)]},
           {"node": I4, "router": I4, "id_hex": S})
    _write(run_dir, "group", "create", {"group": [0, 1], "rank": [1, 2], "size": [3, 2],
                                        "rp": [0, 4], "creator": [0, 4],
                                        "id_hex": ["a" * 32, "b" * 32]},
           {"group": I4, "rank": I4, "size": I4, "rp": I4, "creator": I4, "id_hex": S})
    _write(run_dir, "membership", "join",
           {"group": [g for g, d in GROUPS.items() for _ in d["members"]],
            "member": [m for d in GROUPS.values() for m in d["members"]]},
           {"group": I4, "member": I4})
    _write(run_dir, "node_event", "churn", {"node": [n for n, _, _ in NODE_EVENTS],
                                            "time": [t for _, t, _ in NODE_EVENTS],
                                            "event": [e for _, _, e in NODE_EVENTS]},
           {"node": I4, "time": I8, "event": S})
    if with_publish:
        pubs = [(v, g, k) for v in ("scribe", "reliable") for g in GROUPS for k in range(6)]
        _write(run_dir, "publish", "churn", {
            "group": [g for _, g, _ in pubs], "source": [GROUPS[g]["source"] for _, g, _ in pubs],
            "time": [T[k] for _, _, k in pubs], "variant": [v for v, _, _ in pubs]},
            {"group": I4, "source": I4, "time": I8, "variant": S})
    rows = ([("scribe", *r) for r in scribe_deliveries()]
            + [("reliable", *r) for r in reliable_deliveries()])
    _write(run_dir, "delivery", "churn", {
        "group": [r[1] for r in rows], "member": [r[2] for r in rows],
        "source": [GROUPS[r[1]]["source"] for r in rows],
        "publish_time": [T[r[3]] for r in rows], "time": [T[r[3]] + r[4] for r in rows],
        "hops": [2] * len(rows), "seqno": [r[3] for r in rows],
        "variant": [r[0] for r in rows]},
        {"group": I4, "member": I4, "source": I4, "publish_time": I8, "time": I8, "hops": I2,
         "seqno": I8, "variant": S})
    if with_arrivals:
        rows = reliable_arrivals()
        _write(run_dir, "arrival", "churn", {
            "group": [r[0] for r in rows], "member": [r[1] for r in rows],
            "source": [GROUPS[r[0]]["source"] for r in rows],
            "publish_time": [T[r[2]] for r in rows], "time": [T[r[2]] + r[3] for r in rows],
            "hops": [2] * len(rows), "seqno": [r[2] for r in rows],
            "variant": ["reliable"] * len(rows)},
            {"group": I4, "member": I4, "source": I4, "publish_time": I8, "time": I8,
             "hops": I2, "seqno": I8, "variant": S})
    # a delivery of another phase: not part of the stream when churn_phases = ("churn",)
    _write(run_dir, "delivery", "multicast", {
        "group": [0], "member": [1], "source": [0], "publish_time": [9_000_000],
        "time": [9_010_000], "hops": [1], "seqno": [0], "variant": ["scribe"]},
        {"group": I4, "member": I4, "source": I4, "publish_time": I8, "time": I8, "hops": I2,
         "seqno": I8, "variant": S})
    return run_dir


@pytest.fixture(scope="module")
def frames(spark, tmp_path_factory):
    run_dir = write_churn_run(tmp_path_factory.mktemp("churn") / "churn-1")
    ev = load_events(spark, run_dir)
    phases = ("churn",)
    messages = churn.published_messages(ev["publish"], ev["delivery"], False, phases).cache()
    dead = churn.dead_intervals(ev["node_event"]).cache()
    failures = churn.first_failures(ev["node_event"]).cache()
    arrivals = churn.first_arrivals(ev["delivery"], messages, phases).cache()
    pairs = churn.delivery_outcomes(
        churn.member_deliveries(messages, ev["membership"], failures), arrivals).cache()
    return {"ev": ev, "messages": messages, "dead": dead, "failures": failures,
            "arrivals": arrivals, "outcomes": churn.expected_deliveries(pairs),
            "died": churn.died_deliveries(pairs),
            "surviving": churn.out_of_order(churn.surviving_arrivals(arrivals, failures))}


def rows_of(df, *keys):
    return {tuple(r[k] for k in keys): r.asDict() for r in df.collect()}


@pytest.mark.slow
def test_dead_intervals(frames):
    got = sorted((r["node"], r["dead_from"], r["dead_until"])
                 for r in frames["dead"].collect())
    assert got == [(2, 1_250_000, 1_450_000), (4, 1_150_000, None)]


@pytest.mark.slow
def test_expected_deliveries_are_surviving_members_members_that_died_apart(frames):
    exp = frames["outcomes"].where("variant = 'scribe'")
    per = sorted((r["group"], r["member"], r["publish_time"]) for r in exp.collect())
    assert len(per) == 24                                  # 4 surviving members x 6
    assert not [t for g, m, t in per if m == 2]
    died = sorted((r["member"], r["publish_time"], r["received"])
                  for r in frames["died"].where("variant = 'scribe'").collect())
    assert died == [(2, T[0], 1), (2, T[1], 1), (2, T[2], 1)]   # published before it failed


@pytest.mark.slow
def test_churn_delivery_buckets(frames):
    buckets = churn.churn_delivery(frames["outcomes"], frames["surviving"], frames["messages"],
                                   frames["dead"], 200_000)
    b = rows_of(buckets, "variant", "bucket")
    assert [(b["scribe", k]["expected"], b["scribe", k]["received"]) for k in range(3)] == [
        (8, 8), (8, 2), (8, 7)]
    assert [b["scribe", k]["ratio"] for k in range(3)] == pytest.approx([1, 2 / 8, 7 / 8])
    assert [b["scribe", k]["messages"] for k in range(3)] == [4, 4, 4]
    assert [b["scribe", k]["duplicates"] for k in range(3)] == [1, 0, 0]
    assert [b["scribe", k]["out_of_order"] for k in range(3)] == [0, 0, 1]
    assert [b["scribe", k]["dead_nodes"] for k in range(3)] == [0, 1, 2]
    assert b["scribe", 2]["max_delay_us"] == 150_000
    assert (b["scribe", 1]["bucket_start_us"], b["scribe", 1]["bucket_end_us"]) == (
        1_200_000, 1_400_000)
    assert [b["reliable", k]["ratio"] for k in range(3)] == [1.0, 1.0, 1.0]
    assert b["reliable", 1]["max_delay_us"] == 300_000
    assert len(b) == 6


@pytest.mark.slow
def test_churn_outages(frames):
    out = rows_of(churn.churn_outages(frames["outcomes"]), "variant", "group", "member",
                  "start_us")
    assert set(out) == {("scribe", 0, 3, T[2]), ("scribe", 1, 5, T[2]), ("scribe", 1, 6, T[2])}
    assert (out["scribe", 0, 3, T[2]]["missed"], out["scribe", 0, 3, T[2]]["duration_us"]) == (
        2, 200_000)
    assert (out["scribe", 1, 6, T[2]]["missed"], out["scribe", 1, 6, T[2]]["recovered_us"],
            out["scribe", 1, 6, T[2]]["last_missed_us"]) == (3, T[5], T[4])


@pytest.mark.slow
def test_rp_failover(frames):
    fo = rows_of(churn.churn_rp_failover(frames["messages"], frames["arrivals"],
                                         frames["ev"]["group"], frames["failures"]),
                 "variant", "group")
    assert set(fo) == {("scribe", 1), ("reliable", 1)}
    s = fo["scribe", 1]
    assert (s["rp"], s["failed_us"], s["messages_after"], s["delivered_after"],
            s["first_delivered_us"], s["failover_us"]) == (
                4, 1_150_000, 4, 2, T[4] + 10_000, 260_000)      # k4 at member 5
    assert fo["reliable", 1]["failover_us"] == 350_000           # k2, 300 ms late


@pytest.mark.slow
def test_inferred_messages_miss_undelivered_ones(frames):
    ev = frames["ev"]
    inferred = churn.published_messages(ev["publish"], ev["delivery"], True, ("churn",))
    counts = {r["variant"]: r["count"] for r in inferred.groupBy("variant").count().collect()}
    assert counts == {"scribe": 10, "reliable": 12}   # group 1's k2, k3 reached nobody
    everything = churn.published_messages(ev["publish"], ev["delivery"], True, None)
    assert everything.count() == 23                   # + the other phase's message


def test_bucket_width():
    assert churn_bucket_us(500_000, None) == 25_000
    assert churn_bucket_us(10, None) == 1000
    assert churn_bucket_us(123_456_789, None) == 6_173_000
    assert churn_bucket_us(500_000, 7) == 7
    with pytest.raises(ValueError):
        churn_bucket_us(500_000, 0)


@pytest.mark.slow
def test_run_analysis_writes_churn_outputs(spark, tmp_path):
    from analysis import AnalysisOptions, run_analysis
    from analysis.report import write_report

    run_dir = write_churn_run(tmp_path / "churn-2", with_arrivals=True)
    summary = run_analysis(run_dir, spark, options=AnalysisOptions(
        churn_phases=("churn",), churn_bucket_us=200_000))
    c = summary["churn"]
    assert (c["bucket_us"], c["publishes_from"]) == (200_000, "publish")
    s = c["scribe"]
    assert (s["messages"], s["expected"], s["received"]) == (12, 24, 17)
    assert s["ratio"] == pytest.approx(17 / 24) and s["min_bucket_ratio"] == pytest.approx(2 / 8)
    assert (s["duplicates"], s["out_of_order"], s["outages"], s["outages_recovered"]) == (
        1, 1, 3, 3)
    assert (s["surviving_members"], s["died_members"], s["died_expected"],
            s["died_received"]) == (4, 1, 3, 3)
    assert s["outage_mean_us"] == pytest.approx(700_000 / 3)
    assert (s["rp_failures"], s["rp_failovers"], s["failover_max_us"]) == (1, 1, 260_000)
    r = c["reliable"]
    assert (r["ratio"], r["outages"], r["max_delay_us"], r["failover_mean_us"]) == (
        1.0, 0, 300_000, 350_000)
    assert (r["duplicates"], r["out_of_order"]) == (0, 0)
    # the raw tree stream under the layer: everything arrived, 2 out of order, 1 twice
    tr = c["reliable:tree"]
    assert (tr["ratio"], tr["duplicates"], tr["out_of_order"]) == (1.0, 1, 2)
    assert "scribe:tree" not in c      # plain Scribe: the tree stream is what members get
    metrics = run_dir / "metrics"
    for name, header in {
        "churn_delivery.csv": "topo,variant,bucket,bucket_start_us,bucket_end_us,messages,"
                              "expected,received,ratio,duplicates,out_of_order,mean_delay_us,"
                              "max_delay_us,dead_nodes",
        "churn_outages.csv": "topo,variant,group,member,start_us,last_missed_us,missed,"
                             "recovered_us,duration_us",
        "churn_rp_failover.csv": "topo,variant,group,rp,failed_us,messages_after,"
                                 "delivered_after,first_delivered_us,failover_us",
        "churn_summary.csv": "topo,variant," + ",".join(churn.SUMMARY_COLUMNS)
                             + ",publishes_from" + "".join(   # + spread (analysis/spread.py)
                                 f",{c}_{s}" for c in churn.SUMMARY_COLUMNS
                                 for s in ("std", "ci95_low", "ci95_high"))}.items():
        assert (metrics / name).read_text().splitlines()[0] == header, name
    with open(metrics / "churn_summary.csv", newline="") as f:
        topos = sorted({row["topo"] for row in csv.DictReader(f)})
    assert topos == ["0", "mean"]
    assert (run_dir / "figures" / "churn_delivery.png").stat().st_size > 5000
    assert (run_dir / "figures" / "churn_failover.png").stat().st_size > 5000
    assert json.loads((run_dir / "summary.json").read_text())["churn"]["scribe"]["ratio"] == (
        pytest.approx(17 / 24))
    md, _ = write_report(run_dir)
    assert "Delivery under churn" in md.read_text()
    # the delay metrics still run on the stream's deliveries
    assert np.isfinite(summary["delay_penalty"]["rad"]["max"])
