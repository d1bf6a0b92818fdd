"""cli.py as users run it: `python cli.py ...` in a subprocess.

Bad input must give exactly one stderr line starting with `error:`, exit code 2 and no
traceback; the listing and topology commands must work; (slow) a small scenario must
produce a complete run directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
CLI = ROOT / "cli.py"


def run_cli(*args, cwd=None, timeout=120, env=None):
    e = {k: v for k, v in os.environ.items() if k != "SCRIBE_EMU_DEBUG"}
    e.update({"COLUMNS": "200", "NO_COLOR": "1", **(env or {})})
    return subprocess.run([sys.executable, str(CLI), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or ROOT, env=e)


def assert_bad_input(res, *needles):
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in res.stderr + res.stdout
    for n in needles:
        assert n.lower() in lines[0].lower(), (n, lines[0])
    return lines[0]


def _scenarios_api():
    try:
        import scenarios
    except ImportError:
        return None
    if all(hasattr(scenarios, n) for n in ("load_scenario", "run_scenario", "list_scenarios",
                                           "ScenarioError")):
        return scenarios
    return None


needs_scenarios = pytest.mark.skipif(_scenarios_api() is None,
                                     reason="scenarios/ does not export its API yet")


# ----------------------------------------------------------------------------- help

def test_help_lists_every_command():
    res = run_cli("--help")
    assert res.returncode == 0, res.stderr
    for cmd in ("scenario", "scenarios", "warm", "topology", "analyze", "report"):
        assert cmd in res.stdout
    res = run_cli("scenario", "--help")
    assert res.returncode == 0
    for opt in ("--nodes", "--groups", "--topologies", "--seed", "--shards", "--bootstrap",
                "--address", "--out", "--set", "--resume", "--no-progress"):
        assert opt in res.stdout, opt
    res = run_cli("topology", "generate", "--help")
    assert res.returncode == 0 and "--hosts" in res.stdout


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("args, needles", [
    (["scenario", "quick", "--nodes", "abc"], ["--nodes"]),                 # wrong type
    (["scenario", "quick", "--nodes", "0"], ["--nodes"]),                   # impossible size
    (["scenario", "quick", "--groups", "-3"], ["--groups"]),
    (["scenario", "quick", "--bootstrap", "magic"], ["--bootstrap"]),
    (["scenario", "quick", "--set", "novalue"], ["--set", "key=value"]),
    (["scenario", "quick", "--resume", "/nonexistent/run"], ["--resume"]),
    (["no-such-command"], ["no-such-command"]),
    (["warm", "quick", "nosuch"], ["nosuch"]),                              # before Ray starts
    (["topology", "generate", "nosuch"], ["nosuch", "ts5050"]),             # TopologyError
    (["topology", "generate", "ts600", "--hosts", "-5"], ["--hosts"]),
    (["topology", "generate", "ts600", "--hosts", "10", "--out", "x.txt"], [".npz"]),
    (["topology", "inspect", "/nonexistent/topo.npz"], ["no such topology file"]),
    (["topology", "inspect", "rocketfuel:/nonexistent/1239.cch"], ["1239"]),
    (["analyze", "/nonexistent/run"], ["no such run directory"]),
    (["report", "/nonexistent/run"], ["no such run directory"]),
])
def test_bad_input_is_one_line_exit_2(args, needles):
    assert_bad_input(run_cli(*args), *needles)


def test_unreadable_and_malformed_files(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file")
    assert_bad_input(run_cli("topology", "inspect", bad), "not a topology file")
    # a run directory without summary.json: report refuses it
    (tmp_path / "run").mkdir()
    assert_bad_input(run_cli("report", tmp_path / "run"), "summary.json")
    # analyze needs event logs
    assert_bad_input(run_cli("analyze", tmp_path / "run"), "events")
    # a run directory whose config.toml is broken
    (tmp_path / "run" / "events").mkdir()
    (tmp_path / "run" / "config.toml").write_text("[run\nnodes = ")
    assert_bad_input(run_cli("analyze", tmp_path / "run"), "config.toml")
    if os.geteuid() != 0:          # root reads any file
        locked = tmp_path / "locked.npz"
        locked.write_bytes(b"x")
        locked.chmod(0)
        assert_bad_input(run_cli("topology", "inspect", locked), "readable")


def test_scenario_meta_from_config(tmp_path):
    sys.path.insert(0, str(ROOT))
    import cli
    (tmp_path / "config.toml").write_text(
        'name = "quick"\ndescription = "d"\n[run]\nnodes = 300\ngroups = 5\ntopologies = 1\n'
        '[groups]\nkind = "zipf"\n')
    assert cli.scenario_meta(tmp_path) == {"scenario": "quick", "nodes": 300, "groups": 5,
                                           "topologies": 1}
    assert cli.scenario_meta(tmp_path / "nowhere") == {}


def test_summary_rows_tolerate_partial_summaries():
    sys.path.insert(0, str(ROOT))
    import cli
    rows = dict(cli.summary_rows({
        "scenario": "quick", "nodes": 300, "groups": 5, "topologies": 1,
        "delay_penalty_by_variant": {"scribe": {"rad": {"p50": 1.71}, "rmd": {"p50": 2.5}}},
        "link_stress": {"scribe": {"total": 1200.0, "max": 40}, "ip_multicast": {"note": "x"}},
        "timing": {"emulation_total": 40.77, "analysis_total": 223.4, "phase_join": 3.4},
    }))
    assert rows["nodes"] == "300" and rows["RAD median (scribe)"] == "1.71"
    assert rows["link stress total / max (scribe)"] == "1,200 / 40"
    assert "link stress total / max (ip_multicast)" not in rows
    assert rows["emulation wall time (s)"] == "40.8" and rows["analysis wall time (s)"] == "223.4"
    assert dict(cli.summary_rows({}))["scenario"] == "-"


# ----------------------------------------------------------------------------- topology

def test_topology_generate_and_inspect(tmp_path):
    out = tmp_path / "t.npz"
    res = run_cli("topology", "generate", "ts600", "--hosts", "50", "--seed", "3", "--out", out)
    assert res.returncode == 0, res.stderr
    assert "routers" in res.stdout and "600" in res.stdout
    from topologies import Topology, make_topology
    topo = Topology.load(out)
    assert topo.n_routers == 600 and topo.n_hosts == 50
    ref = make_topology("ts600", 3, 50)          # same source + seed -> same network
    assert np.array_equal(topo.host_router, ref.host_router)
    assert np.array_equal(topo.edge_delay_us, ref.edge_delay_us)

    fig = tmp_path / "fig" / "layout.png"
    res = run_cli("topology", "inspect", out, "--figure", fig)
    assert res.returncode == 0, res.stderr
    assert "diameter_delay_ms" in res.stdout
    for p in (fig, fig.with_name("layout-delays.png")):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_topology_default_output_name(tmp_path):
    res = run_cli("topology", "generate", "ts600", "--hosts", "20", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "ts600-s0-h20.npz").is_file()


# ----------------------------------------------------------------------------- scenarios

@needs_scenarios
def test_scenarios_lists_every_scenario():
    scenarios = _scenarios_api()
    res = run_cli("scenarios")
    assert res.returncode == 0, res.stderr
    infos = scenarios.list_scenarios()
    assert infos
    for info in infos:
        assert info.name in res.stdout
    for name in ("quick", "small_groups_30k", "paper_zipf_1500"):
        assert name in res.stdout


@needs_scenarios
@pytest.mark.parametrize("args, needles", [
    (["scenario", "no_such_scenario"], ["no_such_scenario"]),
    (["scenario", "quick", "--set", "pastry.no_such_key=3"], ["no_such_key"]),
    (["scenario", "quick", "--set", "pastry.l=abc"], ["pastry.l"]),
    (["scenario", "quick", "--nodes", "5", "--shards", "50"], ["shards"]),
])
def test_scenario_bad_input(args, needles):
    assert_bad_input(run_cli(*args), *needles)


@needs_scenarios
def test_scenario_malformed_toml(tmp_path):
    bad = tmp_path / "mine.toml"
    bad.write_text("[run\nnodes = 3")
    assert_bad_input(run_cli("scenario", bad), "mine.toml")


@needs_scenarios
@pytest.mark.slow
def test_quick_scenario_end_to_end(quick_run, quick_reanalysed, tmp_path):
    shared, stdout, stderr = quick_run   # conftest.py: quick --nodes 300 --groups 5 --seeds 1..2
    out = tmp_path / "run"                # report rewrites files: on a copy
    shutil.copytree(shared, out)
    assert str(shared) in stdout
    assert (out / "COMPLETE").is_file()
    # a clean console: no Ray/Spark log lines (e.g. `gcs_client.cc:96: GcsClient has no
    # Cluster ID set`), only our own warnings on stderr
    foreign = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("warning: ")]
    assert not foreign, stderr[-3000:]
    assert "gcs_client" not in stdout and "WARN" not in stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["nodes"] == 300 and summary["groups"] == 5 and summary["topologies"] == 2
    assert (out / "config.toml").is_file() and any((out / "metrics").glob("*.csv"))
    # Spark was started beside the emulation (analysis.warmup=on), and the run waited for
    # it no longer than the whole run took
    assert 0 <= summary["timing"]["spark_wait"] <= summary["timing"]["total"]

    # `report` rewrites the report from the run directory alone
    (out / "report.md").unlink(missing_ok=True)
    res = run_cli("report", out)
    assert res.returncode == 0, res.stderr
    assert "nodes" in (out / "report.md").read_text()

    # `analyze` recomputes the metrics from the Parquet logs (of a copy without its
    # summary, conftest.py): same key figures
    before = summary
    copy, res = quick_reanalysed
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    after = json.loads((copy / "summary.json").read_text())
    for key in ("delay_penalty", "node_stress", "link_stress", "spread"):
        assert after.get(key) == before.get(key), key


def test_unexpected_error_is_one_line_exit_1_with_saved_traceback(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text("[1, 2]")       # valid JSON, not the documented object
    res = run_cli("report", run)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: unexpected "), res.stderr
    assert "Traceback" not in res.stderr
    assert str(run / "run.log") in lines[0]
    assert "Traceback" in (run / "run.log").read_text()
    # SCRIBE_EMU_DEBUG shows the traceback instead
    res = run_cli("report", run, env={"SCRIBE_EMU_DEBUG": "1"})
    assert res.returncode != 0 and "Traceback" in res.stderr
