"""The researcher's report: beside the paper, spread across topologies, `compare`, and
report.html rendered by a real headless Chromium.

Fast tests use hand-written summary CSVs and the committed results/*/summary.json; the slow
ones share one small two-seed `quick` run made through the CLI (conftest.py's quick_run,
also used by tests/test_cli.py).
"""

from __future__ import annotations

import json
import math
import shutil
import tomllib

import pytest

import report_browser
from analysis import published
from analysis.report import write_report
from analysis.spread import add_spread, spread_at, t_interval
from test_cli import ROOT, assert_bad_input, needs_scenarios, run_cli

RESULTS = ROOT / "results"
T_975_2 = 4.302652729749462     # Student t quantile 0.975, 2 degrees of freedom (tables: 4.303)


# ----------------------------------------------------------------------------- spread

def test_t_interval_by_hand():
    iv = t_interval([1.0, 2.0, 3.0])
    assert iv["n"] == 3 and iv["mean"] == 2.0 and iv["std"] == pytest.approx(1.0)
    half = T_975_2 * 1.0 / math.sqrt(3)
    assert iv["ci95_low"] == pytest.approx(2.0 - half) and iv["ci95_high"] == pytest.approx(
        2.0 + half)
    centred = t_interval([1.0, 2.0, 3.0], mean=2.5)          # Spark's mean is the centre
    assert centred["ci95_low"] == pytest.approx(2.5 - half)
    one = t_interval([4.0])
    assert one["n"] == 1 and one["std"] is None and one["ci95_low"] is None


DP_HEADER = ("topo,variant,groups,rad_mean,rad_median,rad_max,rad_p90,rmd_mean,rmd_median,"
             "rmd_max,rmd_p90")


def _dp_csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DP_HEADER + "\n" + "\n".join(rows) + "\n")


def test_add_spread_appends_columns_and_keeps_text(tmp_path):
    metrics = tmp_path / "metrics"
    rows = ["0,scribe,10,1.0,1.5,3.0,2.0,1.0,1.25,3.0,2.0",
            "1,scribe,10,2.0,1.5,3.0,2.0,1.0,1.75,3.0,2.0",
            "2,scribe,10,3.0,1.5,3.0,2.0,1.0,2.0E-4,3.0,2.0",
            "mean,scribe,10.0,2.0,1.5,3.0,2.0,1.0,1.0000666666666667,3.0,2.0"]
    _dp_csv(metrics / "delay_penalty_summary.csv", rows)
    entry = add_spread(metrics)
    lines = (metrics / "delay_penalty_summary.csv").read_text().splitlines()
    header = lines[0].split(",")
    assert lines[0].startswith(DP_HEADER + ",")             # old columns first, unchanged
    assert {"rad_mean_std", "rad_mean_ci95_low", "rad_mean_ci95_high"} <= set(header)
    for old, new in zip(rows, lines[1:], strict=True):       # old cells keep their exact text
        assert new.startswith(old + ",")
    per_topo = dict(zip(header, lines[1].split(","), strict=True))
    assert per_topo["rad_mean_std"] == "" and per_topo["rad_mean_ci95_low"] == ""
    mean = dict(zip(header, lines[4].split(","), strict=True))
    half = T_975_2 / math.sqrt(3)
    assert float(mean["rad_mean_std"]) == pytest.approx(1.0)
    assert float(mean["rad_mean_ci95_low"]) == pytest.approx(2.0 - half)
    assert float(mean["rad_median_std"]) == 0.0                # no spread at all
    assert entry["samples"] == 3 and "note" not in entry
    rad = entry["delay_penalty_by_variant"]["scribe"]["rad"]
    assert rad["mean"]["std"] == pytest.approx(1.0) and rad["mean"]["n"] == 3
    assert rad["p50"]["ci95_high"] == pytest.approx(1.5)       # rad_median -> p50
    # rerunning replaces the spread columns, it does not add more
    again = add_spread(metrics)
    assert (metrics / "delay_penalty_summary.csv").read_text().splitlines()[0] == lines[0]
    assert again == entry


def test_one_topology_is_one_sample(tmp_path):
    metrics = tmp_path / "metrics"
    _dp_csv(metrics / "delay_penalty_summary.csv",
            ["0,scribe,10,1.0,1.5,3.0,2.0,1.0,1.25,3.0,2.0",
             "mean,scribe,10.0,1.0,1.5,3.0,2.0,1.0,1.25,3.0,2.0"])
    entry = add_spread(metrics)
    assert entry["samples"] == 1 and "one topology" in entry["note"]
    assert "delay_penalty_by_variant" not in entry
    mean = (metrics / "delay_penalty_summary.csv").read_text().splitlines()[2]
    assert mean.endswith(",,,")                                 # columns there, empty


def test_add_spread_to_an_older_run(tmp_path):
    from analysis.add_spread import main
    run = tmp_path / "run"
    _dp_csv(run / "metrics" / "delay_penalty_summary.csv",
            ["0,scribe,10,1.0,1.5,3.0,2.0,1.0,1.25,3.0,2.0",
             "1,scribe,10,3.0,1.5,3.0,2.0,1.0,1.25,3.0,2.0",
             "mean,scribe,10.0,2.0,1.5,3.0,2.0,1.0,1.25,3.0,2.0"])
    committed = tmp_path / "summary.json"
    committed.write_text(json.dumps({"scenario": "x", "topologies": 2}))
    assert main([str(run), str(committed)]) == 0
    summary = json.loads(committed.read_text())
    assert summary["scenario"] == "x" and summary["spread"]["samples"] == 2
    assert summary["spread"]["delay_penalty_by_variant"]["scribe"]["rad"]["mean"]["std"] == (
        pytest.approx(math.sqrt(2)))
    assert main([str(tmp_path / "nope")]) == 2


# ----------------------------------------------------------------------------- the paper

def test_published_data_cites_its_source():
    src = published.source()
    assert "JSAC" in src["citation"] and "2002" in src["citation"]
    assert "section IV" in src["citation"] and "10 transit-stub" in src["averaged_over"]
    zipf = {f.label: f for f in published.figures_for("paper_zipf_1500")}
    assert zipf["RAD, median over groups"].value == 1.68
    assert zipf["children entries per node, max"].value == 1059
    assert zipf["link stress total, IP multicast"].value == 758853
    ratio = zipf["link stress total, Scribe / IP multicast"]
    assert ratio.value == pytest.approx(2489824 / 758853, abs=0.005)
    # prefix match for variants of the paper scenario; the bottleneck run uses its variant
    assert len(published.figures_for("paper_zipf_1500_l32")) == len(zipf)
    bott = {f.label: f for f in published.figures_for("paper_zipf_1500_bottleneck")}
    assert bott["RAD, median over groups"].key[1] == "bottleneck"
    assert "children entries per node, max" not in bott
    assert published.figures_for("quick") == [] and published.figures_for(None) == []
    marks = published.figure_marks("paper_zipf_1500")
    assert {"delay_penalty_cdf", "rdp_rank1_cdf", "node_stress:children_tables",
            "node_stress:children_entries", "link_stress"} == set(marks)


def test_beside_paper_on_committed_10_topology_results():
    summary = json.loads((RESULTS / "paper_zipf_1500_10topologies" / "summary.json").read_text())
    rows = {r.label: r for r in published.beside_paper(summary)}
    rad = rows["RAD, median over groups"]
    assert rad.ours == summary["delay_penalty"]["rad"]["p50"]
    assert rad.ratio == pytest.approx(rad.ours / 1.68)
    ls = summary["link_stress"]
    assert rows["link stress total, Scribe / IP multicast"].ours == pytest.approx(
        ls["scribe"]["total"] / ls["ip_multicast"]["total"])
    notes = " ".join(published.setup_notes(summary))
    assert "10 topologies" in notes and "Not the published set-up" not in notes
    # the committed run's overlay was built by the join, as the paper's; a computed one is
    # named as a difference
    assert summary["bootstrap"] == "protocol" and "Not the published overlay" not in notes
    computed = " ".join(published.setup_notes(dict(summary, bootstrap="oracle")))
    assert "Not the published overlay: this run's Pastry tables were computed" in computed
    small = dict(summary, nodes=2000)
    assert "this run has nodes 2,000 (paper 100,000)" in " ".join(published.setup_notes(small))


def test_beside_paper_with_confidence_intervals():
    from analysis.report import beside_paper_section
    summary = json.loads((RESULTS / "paper_zipf_1500_10topologies" / "summary.json").read_text())
    summary["spread"] = {"samples": 10, "delay_penalty_by_variant": {"scribe": {"rad": {
        "p50": {"std": 0.02, "ci95_low": 1.43, "ci95_high": 1.45, "n": 10}}, "rmd": {
        "p50": {"std": 0.2, "ci95_low": 1.2, "ci95_high": 1.7, "n": 10}}}}}
    sec = beside_paper_section(summary)
    assert sec.header == ["figure", "this run", "95 % CI", "published", "ratio",
                          "published in CI"]
    rows = {r[0]: r for r in sec.rows}
    assert rows["RAD, median over groups"][2] == "[1.43, 1.45]"
    assert rows["RAD, median over groups"][5] == "no"          # 1.68 outside [1.43, 1.45]
    assert rows["RMD, median over groups"][5] == "yes"         # 1.69 inside [1.2, 1.7]
    assert rows["children entries per node, mean"][2] == ""    # no spread for it: no CI


def _copy_result(name, tmp_path):
    run = tmp_path / name
    run.mkdir()
    for f in ("summary.json", "config.toml"):
        shutil.copy(RESULTS / name / f, run / f)
    return run


def test_report_of_committed_small_groups(tmp_path):
    run = _copy_result("small_groups_30k", tmp_path)
    md, html = write_report(run)
    text = md.read_text()
    assert "beside the paper" in text and "| 21.2 |" in text and "| 8.5 |" in text
    assert "one topology: every figure is a single sample" in text
    assert "beside the paper" in html.read_text()


# ----------------------------------------------------------------------------- CLI

def test_compare_committed_runs(tmp_path):
    a = _copy_result("paper_zipf_1500", tmp_path)
    b = _copy_result("paper_zipf_1500_10topologies", tmp_path)
    res = run_cli("compare", a, b, "--out", tmp_path / "cmp")
    assert res.returncode == 0, res.stderr
    assert "RAD median (scribe)" in res.stdout and "paper_zipf_1500_10topologies" in res.stdout
    md = (tmp_path / "cmp" / "compare.md").read_text()
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    d = sb["link_stress"]["scribe"]["total"] - sa["link_stress"]["scribe"]["total"]
    row = next(ln for ln in md.splitlines() if ln.startswith("| link stress total (scribe) |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    total_a = sa["link_stress"]["scribe"]["total"]
    assert cells[1] == f"{total_a:,.0f}"                        # one topology: no ±
    assert cells[3] == f"{d:+,.0f}" and cells[4] == f"{d / total_a:+.1%}"
    if "spread" in sb:                                          # B's 10 topologies: ± half CI
        assert "±" in cells[2]
    assert (tmp_path / "cmp" / "compare.html").is_file()


def test_compare_bad_input(tmp_path):
    from analysis.compare import load_run
    good = _copy_result("small_groups_30k", tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "summary.json").write_text("{not json")
    for path, needle in ((tmp_path / "nope", "no such run directory"),
                         (empty, "no summary.json"), (broken, "not valid JSON")):
        with pytest.raises(ValueError, match=needle):
            load_run(path)
    (broken / "summary.json").write_text('{"scenario": "x"}')
    with pytest.raises(ValueError, match="no headline figures"):
        load_run(broken)
    # through the CLI: one line, exit 2, before any output
    assert_bad_input(run_cli("compare", good), "at least two")
    assert_bad_input(run_cli("compare", good, empty), "no summary.json")


def test_seeds_range():
    from cli import BadInput, seed_range
    assert seed_range("1..10", None, None) == (1, 10)
    assert seed_range(" 4 .. 4 ", None, None) == (4, 1)
    for text, seed, topos, needle in (("5..2", None, None, "exceed"), ("1-3", None, None, "A..B"),
                                      ("1..3", None, 2, "--topologies"),
                                      ("1..3", 7, None, "--seed")):
        with pytest.raises(BadInput, match=needle):
            seed_range(text, seed, topos)
    assert_bad_input(run_cli("scenario", "quick", "--seeds", "5..2"), "--seeds", "exceed")


# ----------------------------------------------------------------------------- a real run

@pytest.fixture
def two_seed_run(quick_run):
    """conftest.py's shared run: quick --nodes 300 --groups 5 --seeds 1..2."""
    return quick_run[:2]


@needs_scenarios
@pytest.mark.slow
def test_seeds_give_spread_everywhere(two_seed_run):
    run, _ = two_seed_run
    summary = json.loads((run / "summary.json").read_text())
    config = tomllib.loads((run / "config.toml").read_text())     # --seeds 1..2
    assert (config["run"]["seed"], config["run"]["topologies"]) == (1, 2)
    assert summary["topologies"] == 2
    assert summary["spread"]["samples"] == 2
    s = spread_at(summary, ("node_stress", "scribe", "children_entries", "mean"))
    mean = summary["node_stress"]["scribe"]["children_entries"]["mean"]
    assert s["n"] == 2 and s["ci95_low"] <= mean <= s["ci95_high"]
    header = (run / "metrics" / "link_stress_summary.csv").read_text().splitlines()[0]
    assert "total_std" in header and "total_ci95_low" in header
    text = (run / "report.md").read_text()
    assert "## Spread across topologies" in text and "95 % CI of the mean" in text


@needs_scenarios
@pytest.mark.slow
def test_compare_overlays_figures(two_seed_run, tmp_path):
    run, _ = two_seed_run
    twin = tmp_path / "twin"
    shutil.copytree(run, twin, ignore=shutil.ignore_patterns("events", "checkpoints"))
    res = run_cli("compare", run, twin, "--out", tmp_path / "cmp")
    assert res.returncode == 0, res.stderr
    assert "+0.0%" in res.stdout                               # a run against its own copy
    figs = sorted(p.name for p in (tmp_path / "cmp" / "figures").iterdir())
    assert figs == ["delay_penalty_cdf.png", "link_stress.png", "node_stress.png",
                    "rdp_rank1_cdf.png"]


@needs_scenarios
@pytest.mark.slow
def test_report_renders_in_chromium(two_seed_run, tmp_path):
    browser = report_browser.find_browser()
    if browser is None:
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    run, _ = two_seed_run
    found = report_browser.check_images(run / "report.html", browser)
    figures = sorted((run / "figures").glob("*.png"))
    assert len(found["images"]) == len(figures) >= 4
    for img in found["images"]:
        assert img["complete"] and img["width"] > 300 and img["height"] > 200, img
    shot = report_browser.screenshot(run / "report.html", tmp_path / "report.png", browser)
    assert shot.stat().st_size > 20000                         # not a blank page


def test_help_shows_compare_and_seeds():
    res = run_cli("--help")
    assert res.returncode == 0 and "compare" in res.stdout
    res = run_cli("scenario", "--help")
    assert res.returncode == 0 and "--seeds" in res.stdout
