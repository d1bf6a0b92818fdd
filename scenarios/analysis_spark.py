"""The run's Spark session: started the same way for the analysis and for its warm-up,
and, on one machine, started and warmed up in the background while the emulation runs.

A fresh Spark session's first analysis pays seconds of JVM and worker warm-up that the
run's data has nothing to do with (analysis/warmup.py says what), plus the session's own
start. `SparkWarmup` does both in a driver thread while the
shards emulate, so the analysis that follows the emulation starts on a warm session. The
JVMs are processes of their own and run SCHED_IDLE meanwhile; the thread itself mostly
waits on Ray and Py4J, but the warm-up's own driver-side work (collecting results, writing
its CSVs and figures) takes the GIL from the driver's window loop for moments. It pays
with a spare core: on two cores that two shards keep busy the emulation loses about what
the analysis gains, hence `analysis.warmup = auto`.
Results do not change: the warm-up analyses a throw-away run of its own.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from runtime.ray_spark import (
    keep_new_jvms_low,
    lower_spark_priority,
    lower_this_thread,
    restore_spark_priority,
)

from .progress import log  # the run's logger: what it says lands in run.log

# `analysis.jit = auto`: the client compiler (C1) up to this many nodes x topologies. A
# small or one-topology run's jobs are short, so C1's quick compiling shortens its first
# analysis; a run of about a million node-topologies runs long enough for C2's faster code
# to pay for its compiling. benchmarks/bench_analysis.py --runs times a run's analysis.
C1_MAX_NODE_TOPOLOGIES = 300_000


def jvm_conf(jit: str, nodes: int | None, topologies: int | None) -> dict[str, str]:
    """Spark settings for the JVMs' JIT compiler (`analysis.jit`) of a run of `nodes` x
    `topologies` (None: unknown, then auto keeps Java's default)."""
    c1 = jit == "c1" or (jit == "auto" and nodes is not None
                         and int(nodes) * int(topologies or 1) <= C1_MAX_NODE_TOPOLOGIES)
    if not c1:
        return {}
    option = "-XX:TieredStopAtLevel=1"
    return {"spark.driver.extraJavaOptions": option, "spark.executor.extraJavaOptions": option}


def start_analysis_spark(cfg):
    """The Spark session the analysis of `cfg`'s run uses (RayDP; the running one if any)."""
    from analysis.spark_daemon import worker_conf
    from runtime.ray_spark import ray_is_local, start_spark

    # the worker daemon imports the analysis once before Spark forks its Python workers
    return start_spark(memory=cfg.analysis["executor_memory"],
                       driver_memory=cfg.analysis["driver_memory"],
                       configs={**worker_conf(local=ray_is_local()),
                                **jvm_conf(cfg.analysis["jit"], cfg.nodes, cfg.topologies)},
                       class_archive=cfg.analysis["class_archive"] == "on")


class SparkWarmup:
    """Start Spark and warm it up on a tiny run in a background thread.

    `start()` begins; the thread starts Spark, waits until `topology_file` exists (the
    runner saves it atomically, so an existing file is complete), then runs
    `analysis.warmup.warm_up` on it. `cancel()` says the emulation is over: a warm-up not
    begun yet is skipped. `finish()` (the analysis needs the session) waits for Spark to be
    up and stops a warm-up still running by cancelling its Spark jobs, so a run whose
    emulation is shorter than the warm-up never waits for it (the part done still warms).
    It returns {timing key: seconds}. An error in the thread is logged and dropped: the
    analysis then starts Spark itself and reports the error if it recurs.
    """

    POLL_S = 0.25

    def __init__(self, cfg, topology_file: Path):
        self.cfg, self.topology_file = cfg, Path(topology_file)
        self._cancelled = threading.Event()
        self._warming = None            # the session while the warm-up's jobs run
        self._timing: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, name="spark-warmup", daemon=True)
        self._jvms_low = threading.Event()     # set: stop lowering new JVMs
        self._lowering = None

    def start(self) -> SparkWarmup:
        self._thread.start()
        return self

    def cancel(self) -> None:
        self._cancelled.set()
        self._jvms_low.set()

    def finish(self) -> dict[str, float]:
        """Spark up, the warm-up done or stopped; {"spark_start": s, "spark_warmup": s,
        "spark_wait": s} (spark_warmup: until it ended or was stopped; spark_wait: how long
        the caller waited here, the part of the start the emulation did not hide)."""
        w0 = time.perf_counter()
        self._cancelled.set()
        while self._thread.is_alive():
            warming = self._warming
            if warming is not None:   # only the warm-up's jobs run now: stop them
                warming.sparkContext.cancelAllJobs()
            self._thread.join(self.POLL_S)
        self._jvms_low.set()
        if self._lowering is not None:
            self._lowering.join()
        try:
            restore_spark_priority()    # the analysis runs at normal priority
        except Exception:  # noqa: BLE001 - Ray or a JVM gone: the analysis reports it
            log.info("restoring Spark's priority failed", exc_info=True)
        return {**self._timing, "spark_wait": time.perf_counter() - w0}

    def _run(self) -> None:
        try:
            lower_this_thread()         # Spark's start too yields to the shards,
            # and the JVMs Ray starts for it from their first second
            self._lowering = keep_new_jvms_low(self._jvms_low)
            t0 = time.perf_counter()
            spark = start_analysis_spark(self.cfg)
            self._timing["spark_start"] = time.perf_counter() - t0
            lower_spark_priority()      # the shards first while they emulate
            while not self.topology_file.is_file():
                if self._cancelled.wait(self.POLL_S):
                    return
            if self._cancelled.is_set():
                return
            from analysis.warmup import warm_up
            lower_spark_priority()      # executors that registered since
            t0 = time.perf_counter()
            self._warming = spark
            try:
                warm_up(spark, self.topology_file)
            finally:
                self._warming = None
                self._timing["spark_warmup"] = time.perf_counter() - t0
        except Exception:  # noqa: BLE001 - the analysis starts Spark itself; see class doc
            # info, not warning: the run log has it, the console stays the run's own. A
            # warm-up stopped because the emulation ended first (its Spark jobs cancelled),
            # or a run stopped mid-emulation shutting Ray down under this thread, is no
            # news: one line, without the cancelled jobs' Java trace; a failure keeps its
            # trace
            stopped = self._cancelled.is_set()
            log.info("Spark warm-up %s; the analysis goes on without it",
                     "stopped" if stopped else "failed", exc_info=not stopped)
        finally:    # every JVM of the session is up by now (its Python workers inherit)
            self._jvms_low.set()


def start_warmup(cfg, run_dir: Path) -> SparkWarmup | None:
    """Spark started and warmed up beside the emulation, when `analysis.warmup` is on
    (auto: the machine has a CPU the shards leave free; on two cores busy with two shards
    the emulation loses about what the analysis gains), the Ray cluster is this machine
    (the warm-up run lives in a local temporary directory) and no Spark session is up yet
    (a running one is warm). None when it does not start."""
    from runtime.ray_spark import ray_is_local, spark_running

    mode = cfg.analysis["warmup"]
    spare_cpu = (os.cpu_count() or 1) > cfg.shards
    if mode == "off" or (mode == "auto" and not spare_cpu) or not ray_is_local() \
            or spark_running():
        return None
    return SparkWarmup(cfg, run_dir / "topology" / "topo-0.npz").start()
