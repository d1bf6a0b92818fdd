"""A run's analysis step: Spark (RayDP) over the run's event logs, then the report, rerun
on a fresh Spark session when Spark loses an executor.

Event logs reach Spark as Parquet (one machine, or a named run.storage) or through the
object store (a multi-node cluster without storage): scenarios/event_logs.py. The
object-store path is RayDP's JVM reader, not Ray Data's `to_spark` (a pandas UDF per
block at every use, far too slow for tables of millions of rows, and its tasks wait for
cores that Spark holds): analysis/load.py `load_refs`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from emulator.errors import first_line

from .config import ScenarioConfig
from .event_logs import RunEvents
from .progress import log, warn
from .run_dir import RunState, RunStopped, resume_command

# How long an executor may be gone (its Ray actor restarting, or Spark listing none) before
# the analysis step is abandoned and retried: a restarted RayDP executor that rejoins does
# so within seconds, one that does not never will (runtime.ray_spark.watch_executors).
EXECUTOR_GRACE_S = 30.0


def analyse(cfg, run_dir: Path, state: RunState, events: RunEvents, progress) -> dict:
    """Spark (RayDP) over the run's event logs -- Parquet files, or the hand-off's object
    refs -- then the report. A lost executor stops Spark, starts a fresh session and runs
    the analysis again (it only reads the logs and rewrites its CSVs), up to run.retries
    times; past them RunStopped names the command that reruns it. An executor gone for
    EXECUTOR_GRACE_S counts as lost (runtime.ray_spark.watch_executors)."""
    from analysis.report import write_report

    retries = int(cfg.run["retries"])
    for attempt in range(retries + 1):
        try:
            summary = _analyse_once(cfg, run_dir, state, events, progress)
            break
        except Exception as e:   # noqa: BLE001 - only a lost executor is retried
            lost = getattr(e, "spark_lost", None) or \
                (first_line(e)[:200] if spark_lost(e) else None)
            if lost is None:
                raise
            _stop_spark_quietly()      # a session with a lost executor never recovers
            if attempt == retries:
                raise RunStopped(f"Spark lost an executor during the analysis ({lost}; "
                                 f"restarted {retries} time(s) already; run.retries = "
                                 f"{retries})", run_dir, remedy=_rerun_analysis_command(
                                     run_dir, events)) from e
            warn(f"analysis: Spark lost an executor ({lost}); restarting Spark and the "
                 f"analysis (retry {attempt + 1} of {retries})")
    write_report(run_dir)
    return summary


def _analyse_once(cfg, run_dir: Path, state: RunState, events: RunEvents, progress) -> dict:
    """One try of the analysis on the running (or a new) Spark session; an error while
    the executor watch saw an executor lost carries that as ``spark_lost``."""
    from analysis import run_analysis
    from runtime.ray_spark import spark_running, watch_executors
    from scenarios.analysis_spark import start_analysis_spark

    if not spark_running():     # else started beside the emulation (SparkWarmup) or earlier
        progress.status("analysis: starting Spark (RayDP)")
    w0 = time.perf_counter()
    spark = start_analysis_spark(cfg)
    state.add_time("spark_start", time.perf_counter() - w0)
    progress.status("analysis: computing metrics in Spark")
    with watch_executors(spark, grace_s=EXECUTOR_GRACE_S) as watch:
        try:
            return run_analysis(run_dir, spark, refs=events.refs(), events=events.root(),
                                scenario_meta=_scenario_meta(cfg),
                                extra=_summary_extra(cfg, state),
                                options=_analysis_options(cfg))
        except Exception as e:
            if watch["lost"]:
                e.spark_lost = watch["lost"]
            raise


def _stop_spark_quietly() -> None:
    """raydp.stop_spark on a session that lost an executor: whatever it raises (the dead
    actor, a broken Py4J link) the next try starts a new session anyway."""
    from runtime.ray_spark import stop_spark
    try:
        stop_spark(release=True)
    except Exception:  # noqa: BLE001 - see above
        log.warning("stopping the broken Spark session failed", exc_info=True)


def _rerun_analysis_command(run_dir: Path, events: RunEvents) -> str:
    """What reruns the analysis alone: `analyze` reads kept Parquet logs; a hand-off run
    kept none, only --resume (which emulates again) can."""
    if events.layout.handoff:
        return f"resume with: {resume_command(run_dir)}"
    return (f"rerun the analysis with: python cli.py analyze {run_dir} "
            f"(or {resume_command(run_dir)})")


# What Spark and RayDP say when an executor (a Ray actor) or the driver's link to it died;
# anything else (a bug, bad data) fails the same way again and is not retried.
_SPARK_LOST = re.compile(r"ExecutorLostFailure|executor \S+ (?:lost|exited)|Lost executor|"
                         r"SparkContext (?:was|has been) shut down|RayActorError|"
                         r"Py4JNetworkError|Answer from Java side is empty|"
                         r"Connection refused|Python worker exited unexpectedly|"
                         r"Worker exited unexpectedly", re.IGNORECASE)


def spark_lost(exc: BaseException) -> bool:
    """True when `exc` (from the analysis) means Spark lost an executor or its JVM."""
    seen = 0
    while exc is not None and seen < 5:
        if _SPARK_LOST.search(f"{type(exc).__name__}: {exc}"):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _summary_extra(cfg: ScenarioConfig, state: RunState) -> dict:
    d = state.d
    extra = {"timing": dict(d["timing"]), "emulation": {"phases": d["phases"]}}
    counters = d["counters"]
    if counters:
        first = next(iter(counters.values()))
        extra["emulation"].update({"delta_us": first["delta_us"],
                                   "lookahead_us": first["lookahead_us"],
                                   "shards": cfg.shards,
                                   "windows": sum(c["windows"] for c in counters.values()),
                                   "lost_messages": sum(c["lost_total"]
                                                        for c in counters.values())})
        total: dict[str, int] = {}
        for c in counters.values():
            for k, v in c["counts"].items():
                total[k] = total.get(k, 0) + int(v)
        extra["emulation"]["counters"] = dict(sorted(total.items()))
    if d["quality"]:
        extra["overlay_quality"] = d["quality"]
    if d.get("churn_schedule"):
        extra["churn_schedule"] = d["churn_schedule"]
    return extra


def _analysis_options(cfg: ScenarioConfig):
    from actors.stack import type_names
    from analysis.schema import AnalysisOptions
    kw = {"type_names": type_names(),
          "shared_storage": True if cfg.analysis["shared_storage"] else None}
    if "churn" in cfg.phase_order:
        kw["churn_phases"] = ("churn",)
    return AnalysisOptions(**kw)


def _scenario_meta(cfg: ScenarioConfig) -> dict:
    return {"scenario": cfg.name, "nodes": cfg.nodes, "groups": cfg.groups,
            "topologies": cfg.topologies, "seed": cfg.seed, "shards": cfg.shards,
            "topology_source": cfg.topology["source"], "bootstrap": cfg.pastry["bootstrap"],
            "phases": cfg.phase_order}

