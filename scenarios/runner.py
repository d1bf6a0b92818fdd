"""Run a scenario into a run directory: emulate every topology, analyse, mark it complete.

The runner composes steps that each live in a module of their own:

  run_dir.py         the run directory: state.json (what is done, for --resume), run.log,
                     the event-log layout, RunStopped and the command that resumes
  progress.py        the run's logger, warnings, the status line
  memory.py          the memory estimate, and the check that refuses a run that won't fit
  emulation.py       one topology: built, its shards started or restored from a
                     checkpoint, the phases left run, a lost shard's phase replayed
  phases.py          what each phase injects, and one phase run, logged and checkpointed
  churn.py           the churn phase's schedule of multicasts, failures and recoveries
  analysis_step.py   the Spark analysis and the report, rerun when an executor is lost
  analysis_spark.py  the run's Spark session, and its warm-up beside the emulation

Files are written in an order that never makes a half-done run look complete: `COMPLETE`
comes last.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from datetime import datetime
from pathlib import Path

from .analysis_step import analyse
from .config import ScenarioConfig, ScenarioError
from .emulation import run_topology
from .event_logs import RunEvents
from .memory import check_memory
from .progress import Progress, log
from .run_dir import (
    RunState,
    RunStopped,
    has_work,
    new_run_dir,
    open_events,
    open_run_log,
    resume_command,
    scenario_to_run,
)

__all__ = ["MIN_NODES_PER_SHARD", "MIN_NODES_PER_SHARD_PROTOCOL", "auto_shards", "emulate_only",
           "run_scenario"]

# errors of a write that more space, or a writable directory, would have let through
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                   errno.EFBIG}


def run_scenario(cfg, *, out: Path | None = None, address: str | None = None,
                 resume: Path | None = None, progress: bool = True,
                 force: bool = False) -> Path:
    """Run `cfg` (a ScenarioConfig or a scenario name) and return the run directory.

    resume: a run directory of an interrupted run; its config.toml is used (cfg may be
    None) and completed phases are skipped by restoring the last checkpoint.
    force: run even when the memory estimate exceeds the machine's (or cluster's) memory.
    Raises ScenarioError on bad input (and on a run that cannot fit), RunStopped when the
    run stops for an outside reason (shard lost past run.retries, full disk); a
    KeyboardInterrupt leaving here carries ``resume_command``. A failed run keeps its
    directory without COMPLETE (or loses it entirely when it failed before any work).
    """
    cfg = _start_runtime(cfg, out, address, resume, force)
    created = resume is None
    run_dir = new_run_dir(cfg, out) if created else Path(resume)
    if created:
        (run_dir / "config.toml").write_text(cfg.to_toml())
    handler = open_run_log(run_dir)
    state = RunState(run_dir / "state.json")
    started_work = bool(state.d["completed"])
    try:
        events = open_events(cfg, run_dir, state, resumed=not created)
        _run_and_analyse(cfg, run_dir, state, events, progress)
        log.info("run complete: %s", run_dir)
        return run_dir
    except ScenarioError:
        log.exception("scenario failed on bad input")
        if created and not has_work(run_dir, started_work or bool(state.d["completed"])):
            _remove(run_dir, handler)
            handler = None
        raise
    except OSError as e:
        if e.errno not in _STORAGE_ERRNOS:
            log.exception("run failed (resume with %s)", resume_command(run_dir))
            raise
        log.exception("a write failed: the run stops")
        raise RunStopped(f"cannot write {e.filename or 'to the run directory'}: "
                         f"{e.strerror or e}", run_dir) from None
    except KeyboardInterrupt as e:
        log.warning("interrupted (resume with %s)", resume_command(run_dir))
        e.resume_command = resume_command(run_dir)
        raise
    except BaseException:
        log.exception("run failed (resume with %s)", resume_command(run_dir))
        raise
    finally:
        if handler is not None:
            log.removeHandler(handler)
            handler.close()


def _start_runtime(cfg, out, address, resume, force) -> ScenarioConfig:
    """The validated configuration, with Ray started (or joined) and the memory checked
    (before anything is written on an embedded Ray; on a cluster once connected)."""
    embedded = not (address or os.environ.get("RAY_ADDRESS"))
    cfg = scenario_to_run(cfg, out, resume)
    if embedded:
        check_memory(cfg, force=force)
    from runtime.ray_spark import start_ray
    start_ray(address)                        # a bad --address fails here, in seconds
    if not embedded:
        check_memory(cfg, force=force, cluster=True)
    return cfg


# Below this many nodes per shard a window's synchronisation costs more than a second shard
# saves: on two cores `churn` (3,000 nodes) is slower on two shards than on one, a
# 10,000-node overlay no faster, `small_groups_30k` (50,000 nodes) faster
# (benchmarks/bench_scale.py measures a scenario's phases at each K).
MIN_NODES_PER_SHARD = 10_000
# The same with the overlay built by the join protocol: its arrivals (50 a second) keep
# every window sparse and lopsided whatever the overlay's size, and a cell's fixed cost is
# paid by every shard with messages in it (docs/ARCHITECTURE.md, "Window
# synchronisation"), so the join phase gains nothing from a second shard and a shard must
# hold far more nodes to pay for its set-up. On two cores a second shard speeds up the
# later phases by about what it costs the analysis, whose Spark warm-up then has no core
# of its own: the published scenarios run end to end in the same time on one shard or two
# (BENCHMARKS.md, `small_groups_30k` at 2 shards against 1).
MIN_NODES_PER_SHARD_PROTOCOL = 100_000


def auto_shards(cpus: int, nodes: int, protocol: bool = False) -> int:
    """Shards for ``shards = 0``: one per CPU, but at most one per MIN_NODES_PER_SHARD
    nodes, or per MIN_NODES_PER_SHARD_PROTOCOL when the join protocol builds the overlay
    (``protocol``; a small overlay runs faster whole; results are the same for any
    count)."""
    per = MIN_NODES_PER_SHARD_PROTOCOL if protocol else MIN_NODES_PER_SHARD
    return max(1, min(int(cpus), int(nodes) // per))


def emulate_only(cfg: ScenarioConfig, run_dir: Path, one_by_one: bool = False) -> None:
    """Topology 0 of `cfg` emulated into the new directory `run_dir` (its event logs and
    state), on the Ray already started, without the analysis: scenarios/warm.py's runs
    (``one_by_one``: every run through its own handler, actors/stack.py)."""
    run_dir = new_run_dir(cfg, run_dir)
    (run_dir / "config.toml").write_text(cfg.to_toml())
    handler = open_run_log(run_dir)
    try:
        state = RunState(run_dir / "state.json")
        events = open_events(cfg, run_dir, state, resumed=False)
        with Progress(False, 1) as progress:
            run_topology(cfg, run_dir, 0, state, events, progress, one_by_one)
    finally:
        log.removeHandler(handler)
        handler.close()


def _run_and_analyse(cfg, run_dir: Path, state: RunState, events: RunEvents,
                     progress: bool) -> None:
    """Emulate every topology not done yet, analyse, write timing.total and COMPLETE."""
    t_start = time.perf_counter()
    if cfg.shards == 0:  # one shard per CPU of the cluster; recorded for --resume
        import ray
        cpus = int(ray.cluster_resources().get("CPU", 1))
        cfg.run["shards"] = auto_shards(cpus, cfg.nodes, cfg.pastry["bootstrap"] == "protocol")
        (run_dir / "config.toml").write_text(cfg.to_toml())
    log.info("scenario %s: %d nodes, %d groups, %d topologies, %d shards -> %s", cfg.name,
             cfg.nodes, cfg.groups, cfg.topologies, cfg.shards, run_dir)
    from .analysis_spark import start_warmup  # imports the Spark runtime: on use only
    warmup = start_warmup(cfg, run_dir)
    with Progress(progress, cfg.topologies) as prog:
        try:
            for t in range(cfg.topologies):
                if t not in state.d["topologies_done"]:
                    run_topology(cfg, run_dir, t, state, events, prog)
        finally:
            if warmup is not None:
                warmup.cancel()
        state.add_time("emulation_total", time.perf_counter() - t_start)
        state.save()
        if warmup is not None:
            prog.status("analysis: waiting for Spark to start (started with the emulation)")
            for key, seconds in warmup.finish().items():
                state.add_time(key, seconds)
        _analyse(cfg, run_dir, state, events, prog)
    _record_total(run_dir, state, time.perf_counter() - t_start)
    (run_dir / "COMPLETE").write_text(datetime.now().isoformat(timespec="seconds") + "\n")


def _analyse(cfg, run_dir: Path, state: RunState, events: RunEvents, progress) -> dict:
    """The analysis step (scenarios/analysis_step.py); a name of the runner's own, which
    tests and benchmarks replace to run the emulation alone."""
    return analyse(cfg, run_dir, state, events, progress)


def _record_total(run_dir: Path, state: RunState, seconds: float) -> None:
    """summary.json timing.total: the run's whole wall time (Ray start, emulation, Spark
    start, analysis, report) in this invocation (a resumed run: since the resume)."""
    from analysis.output import write_json
    state.add_time("total", seconds)
    state.save()
    path = run_dir / "summary.json"
    summary = json.loads(path.read_text())
    summary.setdefault("timing", {})["total"] = state.d["timing"]["total"]
    write_json(summary, path)


def _remove(run_dir: Path, handler) -> None:
    """Delete a new run's directory that holds nothing worth keeping, run.log closed first."""
    log.removeHandler(handler)
    handler.close()
    shutil.rmtree(run_dir, ignore_errors=True)
