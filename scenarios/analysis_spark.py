"""The run's Spark session: started the same way for the analysis and for its warm-up,
and, on one machine, started and warmed up in the background while the emulation runs.

A fresh Spark session's first analysis pays ~10-15 s of JVM and worker warm-up that the
run's data has nothing to do with (analysis/warmup.py says what and how it was measured),
plus the session's own start (7-14 s). `SparkWarmup` does both in a driver thread while the
shards emulate, so the analysis that follows the emulation starts on a warm session. The
thread only waits on Ray and Py4J (the GIL is free for the driver's window loop); the JVMs
are processes of their own, which share the machine's cores with the shards for those
seconds. Results do not change: the warm-up analyses a throw-away run of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

log = logging.getLogger("scribe_emu.runner")


def start_analysis_spark(cfg):
    """The Spark session the analysis of `cfg`'s run uses (RayDP; the running one if any)."""
    from analysis.spark_daemon import worker_conf
    from emulator.runtime import ray_is_local, start_spark

    # the worker daemon imports the analysis once before Spark forks its Python workers
    return start_spark(memory=cfg.analysis["executor_memory"],
                       driver_memory=cfg.analysis["driver_memory"],
                       configs=worker_conf(local=ray_is_local()))


class SparkWarmup:
    """Start Spark and warm it up on a tiny run in a background thread.

    `start()` begins; the thread starts Spark, waits until `topology_file` exists (the
    runner saves it atomically, so an existing file is complete), then runs
    `analysis.warmup.warm_up` on it. `finish()` waits for the thread (the analysis needs the
    session) and returns {timing key: seconds}; an error in the thread is logged and
    dropped: the analysis then starts Spark itself and reports the error if it recurs.
    `cancel()` stops the wait for the topology (a run that fails before it exists).
    """

    POLL_S = 0.25

    def __init__(self, cfg, topology_file: Path):
        self.cfg, self.topology_file = cfg, Path(topology_file)
        self._cancelled = threading.Event()
        self._timing: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, name="spark-warmup", daemon=True)

    def start(self) -> SparkWarmup:
        self._thread.start()
        return self

    def cancel(self) -> None:
        self._cancelled.set()

    def finish(self) -> dict[str, float]:
        """Wait for the warm-up; {"spark_start": s, "spark_warmup": s, "spark_wait": s}
        (spark_wait: how long the caller waited here, the part the emulation did not hide)."""
        w0 = time.perf_counter()
        self._thread.join()
        return {**self._timing, "spark_wait": time.perf_counter() - w0}

    def _run(self) -> None:
        try:
            t0 = time.perf_counter()
            spark = start_analysis_spark(self.cfg)
            self._timing["spark_start"] = time.perf_counter() - t0
            while not self.topology_file.is_file():
                if self._cancelled.wait(self.POLL_S):
                    return
            from analysis.warmup import warm_up
            self._timing["spark_warmup"] = warm_up(spark, self.topology_file)
        except Exception:  # noqa: BLE001 - the analysis starts Spark itself; see class doc
            # info, not warning: the run log has it, the console stays the run's own (a run
            # stopped mid-emulation shuts Ray down under this thread, which is no news)
            log.info("Spark warm-up %s; the analysis starts Spark itself",
                     "stopped with the run" if self._cancelled.is_set() else "failed",
                     exc_info=True)
