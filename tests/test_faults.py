"""Faults a run survives, on the real runtime (the test session's Ray and Spark):

- nothing the run starts listens beyond 127.0.0.1 (Ray head, raylet, agents, workers,
  Spark driver, RayDP master and executors);
- a shard process SIGKILLed mid-phase is replaced and the phase replayed from the last
  checkpoint: the finished run's event logs equal an unharmed run's, row for row;
- the driver SIGKILLed mid-phase: `--resume` finishes the emulation with identical logs;
- Ctrl-C stops cleanly (no Ray or Java process left), printing the resume command, and
  `--resume` finishes the run with identical results (logs, CSVs, figures);
- a checkpoint write failing with ENOSPC stops the run with one line, keeps the completed
  phases, and `--resume` continues once the write works again;
- a Spark executor SIGKILLed during the analysis: a fresh Spark session reruns it, with
  every CSV and figure as an unharmed run's; past run.retries one line names `cli.py
  analyze`.

The unharmed run is the session's reference run (tests/runs.py, 2 shards). A test of the
emulation compares event logs and skips the analysis (the analysis of those very logs is
the reference's); the executor tests analyse a copy of the reference's emulated run."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from runs import (
    emulated_copy,
    log_differences,
    reference_cli_args,
    reference_config,
    result_differences,
)
from scenarios import analysis_step, run_scenario
from scenarios import run_dir as run_dir_mod
from scenarios import runner as runner_mod
from test_cli import CLI

pytestmark = pytest.mark.slow

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def cfg(*sets):
    return reference_config(2, *sets)


@pytest.fixture
def reference(reference_runs) -> Path:
    return reference_runs[2]


@pytest.fixture
def no_analysis(monkeypatch):
    """Runs of this test stop after their emulation (and write COMPLETE)."""
    monkeypatch.setattr(runner_mod, "_analyse", lambda *a, **k: {})
    monkeypatch.setattr(runner_mod, "_record_total", lambda *a, **k: None)


# ---- open ports -----------------------------------------------------------------------------

def run_processes() -> list[psutil.Process]:
    """This process, everything it started, and the processes of its Ray session (other
    Ray clusters on the machine are not ours and are left out, as are the session's
    background jobs running meanwhile: each is a run of its own, e.g. a simulated
    cluster whose nodes listen on their node address)."""
    import ray

    from conftest import background_processes
    me = psutil.Process()
    others = background_processes()
    procs = {p.pid: p for p in [me, *me.children(recursive=True)] if p.pid not in others}
    session_dir = ray._private.worker._global_node.get_session_dir_path()
    for p in psutil.process_iter(["cmdline"]):
        if any(session_dir in a for a in (p.info["cmdline"] or [])):
            procs.setdefault(p.pid, p)
            for c in tree(p.pid):
                procs.setdefault(c.pid, c)
    return list(procs.values())


def test_nothing_listens_beyond_loopback(spark):
    from runtime import ray_spark as runtime
    assert runtime.ray_is_local() and runtime._state["spark"] is not None  # Spark is up
    listening, kinds = [], set()
    for p in run_processes():
        try:
            conns = p.net_connections(kind="inet")
            name = " ".join(p.cmdline())[:120]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                listening.append((c.laddr.ip, c.laddr.port, p.pid, name))
                kinds.add("java" if "java" in name else "ray" if "ray" in name else "other")
    assert {"java", "ray"} <= kinds, listening      # Spark's JVMs and Ray's processes seen
    exposed = [x for x in listening if x[0] not in LOOPBACK]
    assert not exposed, exposed


# ---- a shard process dies ----------------------------------------------------------------

def test_shard_killed_mid_phase_is_replayed_to_the_same_logs(reference, no_analysis,
                                                             tmp_path, monkeypatch):
    """Also: with a named run.storage the shards write their logs and checkpoints there,
    and the run directory holds a pointer to it instead."""
    import ray

    from emulator.driver import Emulator
    real_get = Emulator._get
    calls = {"join": 0, "killed": []}

    def get_and_kill(self, refs, what, *ids):
        if what == "phase 'join'" and not calls["killed"]:
            calls["join"] += 1
            if calls["join"] == 2:           # a window or two into the phase
                pid = ray.get(self._actors[1].__ray_call__.remote(lambda a: os.getpid()))
                os.kill(pid, signal.SIGKILL)
                calls["killed"].append(pid)
        return real_get(self, refs, what, *ids)

    monkeypatch.setattr(Emulator, "_get", get_and_kill)
    c = cfg()
    store = tmp_path / "storage"
    c.run["storage"] = str(store)
    out = run_scenario(c, out=tmp_path / "run", progress=False)
    assert calls["killed"], "the join phase never reached its second window"
    log = (out / "run.log").read_text()
    assert "shard 1 crashed during phase 'join'" in log and "retry 1 of 2" in log
    assert (out / "COMPLETE").is_file()
    assert (out / "STORAGE").read_text().strip() == str(store)
    assert not (out / "events").exists() and not (out / "checkpoints").exists()
    assert sorted(p.name for p in (store / "checkpoints").iterdir()) == sorted(c.phase_order)
    assert log_differences(store, reference) == []


def test_shard_lost_past_the_retries_names_the_resume_command(session, tmp_path,
                                                             monkeypatch):
    import ray

    from emulator.driver import Emulator
    real_get = Emulator._get

    killed = set()

    def always_kill(self, refs, what, *ids):
        if what == "phase 'create'" and id(self) not in killed:   # each new set of shards
            killed.add(id(self))
            pid = ray.get(self._actors[0].__ray_call__.remote(lambda a: os.getpid()))
            os.kill(pid, signal.SIGKILL)
        return real_get(self, refs, what, *ids)

    monkeypatch.setattr(Emulator, "_get", always_kill)
    out = tmp_path / "run"
    with pytest.raises(runner_mod.RunStopped) as e:
        run_scenario(cfg("run.retries=1"), out=out, progress=False)
    msg = str(e.value)
    assert len(killed) == 2                                   # the first try and one retry
    assert "shard 0 crashed during phase 'create'" in msg and "run.retries = 1" in msg
    assert msg.endswith(f"resume with: python cli.py scenario --resume {out}")
    assert json.loads((out / "state.json").read_text())["completed"]["0"] == ["bootstrap"]


# ---- the driver dies, or is interrupted -------------------------------------------------------

def start_cli(*args) -> subprocess.Popen:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("SCRIBE_EMU_DEBUG", None)
    return subprocess.Popen([sys.executable, str(CLI), *map(str, args)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 240.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = predicate()
        if got:
            return got
        if proc.poll() is not None:
            pytest.fail(f"the run ended first: {proc.returncode} {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    pytest.fail("timed out")


def tree(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def name(p: psutil.Process) -> str:
    try:
        return p.name()
    except psutil.Error:
        return ""


def reap(procs: list[psutil.Process], timeout: float = 30.0) -> list[psutil.Process]:
    """Wait for `procs` to end; return those still alive (then killed, to leave nothing)."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    return alive


def completed(out: Path) -> list[str]:
    try:
        return json.loads((out / "state.json").read_text())["completed"].get("0", [])
    except (OSError, ValueError):
        return []


def test_driver_killed_mid_phase_resumes_to_identical_logs(reference, no_analysis, tmp_path):
    out = tmp_path / "run"
    proc = start_cli(*reference_cli_args(2), "--out", out, "--no-progress")
    done = wait_for(lambda: completed(out), proc)
    children = tree(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    # the dead driver's own Ray: this test claims nothing of it, and its processes would
    # hold cores during the resume
    reap(children, timeout=0)
    assert not (out / "COMPLETE").exists()
    left = completed(out)
    assert left[: len(done)] == done and len(left) < len(cfg().phase_order), left
    assert run_scenario(None, resume=out, progress=False) == out
    assert (out / "COMPLETE").is_file()
    assert log_differences(out, reference) == []


def test_ctrl_c_stops_cleanly_and_resume_gives_identical_results(reference, tmp_path):
    """Interrupted once Spark starts (the analysis, every phase done): the resumed run
    analyses the logs kept and gives every result of the unharmed run."""
    out = tmp_path / "run"
    proc = start_cli(*reference_cli_args(2), "--out", out, "--no-progress")

    def spark_started():
        kids = tree(proc.pid)
        return kids if any(name(p) == "java" for p in kids) else None

    children = wait_for(spark_started, proc)
    os.killpg(proc.pid, signal.SIGINT)            # what a terminal's Ctrl-C does
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[-1] == f"interrupted; resume with: python cli.py scenario --resume {out}", err
    # a clean console: only our own lines (no Ray/Spark log lines) on stderr
    assert all(ln.startswith(("warning:", "interrupted")) for ln in lines), err
    left = reap(children, timeout=30)
    assert not left, [" ".join(p.cmdline()[:3]) for p in left if p.is_running()]
    assert not (out / "COMPLETE").exists()
    assert run_scenario(None, resume=out, progress=False) == out
    assert (out / "COMPLETE").is_file()
    assert result_differences(out, reference) == []


# ---- storage ----------------------------------------------------------------------------------

def test_full_disk_stops_with_one_line_and_resume_continues(reference, no_analysis, tmp_path,
                                                          monkeypatch):
    real_save = run_dir_mod.RunState.save

    def save_until_join(self):
        if "join" in self.d["completed"].get("0", []):
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        real_save(self)

    monkeypatch.setattr(run_dir_mod.RunState, "save", save_until_join)
    out = tmp_path / "run"
    with pytest.raises(runner_mod.RunStopped) as e:
        run_scenario(cfg(), out=out, progress=False)
    msg = str(e.value)
    assert "\n" not in msg and "No space left on device" in msg and "state.json" in msg
    assert msg.endswith(f"resume with: python cli.py scenario --resume {out}")
    assert completed(out) == ["bootstrap", "create"]          # completed phases kept
    assert (out / "checkpoints" / "create" / "driver.json").is_file()
    monkeypatch.setattr(run_dir_mod.RunState, "save", real_save)  # space is back
    assert run_scenario(None, resume=out, progress=False) == out
    assert (out / "COMPLETE").is_file()
    assert log_differences(out, reference) == []


# ---- Spark loses an executor ------------------------------------------------------------------

def executor_actors() -> dict[str, tuple[str, int]]:
    """{actor id: (state, pid)} of RayDP's executor actors (Ray's GCS actor table)."""
    import ray._private.state
    return {aid: (a["State"], a.get("Pid") or 0) for aid, a in ray._private.state.actors().items()
            if str(a.get("Name", "")).startswith("raydp-executor-")}


def kill_executor_mid_analysis(monkeypatch, for_good: bool) -> list[int]:
    """Make the next analysis SIGKILL its executor's JVM once Spark runs its jobs; with
    `for_good`, again each time Ray restarts that executor actor (a lost node: it never
    comes back), until the actor is dead. Returns the killed pids (filled as it goes)."""
    import threading

    import analysis
    real = analysis.run_analysis
    killed: list[int] = []

    def killer(spark):
        tracker = spark.sparkContext.statusTracker()
        target, t0 = None, time.monotonic()
        while time.monotonic() - t0 < 300:
            actors = executor_actors()
            if target is None:
                alive = [a for a, (state, pid) in actors.items() if state == "ALIVE" and pid]
                if alive and tracker.getActiveJobsIds():   # the analysis' jobs are running
                    target = alive[0]
            if target is not None:
                state, pid = actors.get(target, ("DEAD", 0))
                if state == "DEAD" or (killed and not for_good):
                    return
                if pid and pid not in killed and psutil.pid_exists(pid):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.2)

    def run_analysis_with_a_kill(run_dir, spark, **kwargs):
        if not killed:
            threading.Thread(target=killer, args=(spark,), daemon=True).start()
        return real(run_dir, spark, **kwargs)

    monkeypatch.setattr(analysis, "run_analysis", run_analysis_with_a_kill)
    return killed


def test_lost_spark_executor_reruns_the_analysis(reference, tmp_path, monkeypatch):
    """The executor's JVM is SIGKILLed mid-analysis, and its restarts too: the watch
    cancels the jobs after the grace time, the runner stops Spark, starts a fresh session
    and reruns the analysis: every CSV as the unharmed run's."""
    killed = kill_executor_mid_analysis(monkeypatch, for_good=True)
    monkeypatch.setattr(analysis_step, "EXECUTOR_GRACE_S", 5.0)     # it never comes back
    out = emulated_copy(reference, tmp_path / "run")
    assert run_scenario(None, resume=out, progress=False) == out
    assert killed, "no executor was killed during the analysis"
    log = (out / "run.log").read_text()
    assert "analysis: Spark lost an executor" in log and "retry 1 of 2" in log, log[-3000:]
    assert_same_analysis(out, reference)


def test_spark_executor_killed_once_gives_the_same_csvs(reference, tmp_path, monkeypatch):
    """One SIGKILL: RayDP's restarted executor may rejoin and Spark rerun the lost tasks
    (seen at load ~40), or not (then the analysis is rerun as above); either way every
    CSV is the unharmed run's."""
    killed = kill_executor_mid_analysis(monkeypatch, for_good=False)
    monkeypatch.setattr(analysis_step, "EXECUTOR_GRACE_S", 10.0)
    out = emulated_copy(reference, tmp_path / "run")
    assert run_scenario(None, resume=out, progress=False) == out
    assert len(killed) == 1
    assert_same_analysis(out, reference)


def test_lost_spark_executor_past_the_retries_names_the_analyze_command(
        reference, tmp_path, monkeypatch):
    """Every try loses its executor: one line naming `cli.py analyze RUN_DIR`, the
    emulation kept (every phase completed), no COMPLETE."""
    import analysis
    from runtime import ray_spark as runtime

    tries = []

    def executor_lost(run_dir, spark, **kwargs):
        tries.append(1)
        raise RuntimeError("Job aborted: ExecutorLostFailure (executor 0 exited)")

    monkeypatch.setattr(analysis, "run_analysis", executor_lost)
    out = emulated_copy(reference, tmp_path / "run")
    text = (out / "config.toml").read_text()
    assert "retries = 2" in text
    (out / "config.toml").write_text(text.replace("retries = 2", "retries = 1"))
    with pytest.raises(runner_mod.RunStopped) as e:
        run_scenario(None, resume=out, progress=False)
    msg = str(e.value)
    assert len(tries) == 2 and "\n" not in msg
    assert "Spark lost an executor during the analysis" in msg and "run.retries = 1" in msg
    assert f"rerun the analysis with: python cli.py analyze {out}" in msg
    assert completed(out) == cfg().phase_order and not (out / "COMPLETE").exists()
    assert runtime._state["spark"] is None          # the broken session was stopped


def assert_same_analysis(run_dir: Path, ref: Path) -> None:
    """The analysis of `run_dir` gave every CSV (byte for byte) and every summary figure
    of the reference's (on logs copied from it)."""
    assert (run_dir / "COMPLETE").is_file()
    assert result_differences(run_dir, ref) == []
