"""Spark's Python worker daemon, with the analysis' imports done once before it forks.

Spark starts one daemon per executor (`python -m <spark.python.daemon.module>`) and forks
every Python worker from it. With pyspark's own daemon each worker imports numpy, pandas,
pyarrow, the analysis kernels and `topologies` (scipy) itself: seconds of CPU per worker,
paid again by every worker of a fresh session. Here the daemon imports them first, so the
forked workers start with them loaded (copy-on-write). Nothing else changes: the workers
run pyspark's own worker loop.

Use: `start_spark(configs=worker_conf(local=...))`: `spark.python.daemon.module` is a
static setting, given when Spark starts.
"""

from __future__ import annotations


def worker_conf(local: bool) -> dict[str, str]:
    """Spark settings for this daemon. Only on one machine (`local`: an embedded Ray): on a
    cluster the executors' Python may not have this checkout on its path, and the daemon
    starts before any `addPyFile` code reaches the workers."""
    return {"spark.python.daemon.module": "analysis.spark_daemon"} if local else {}


def preload() -> None:
    """Import what the analysis' grouped maps use (a failed import is left to the worker
    that needs it, which then reports it as usual)."""
    import importlib
    for module in ("numpy", "pandas", "pyarrow", "pyspark.sql.pandas.serializers",
                   "pyspark.sql.pandas.types", "pyspark.worker", "analysis.physical",
                   "analysis.delay", "analysis.link_stress", "analysis.node_stress",
                   "analysis.stats", "topologies"):
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001,S112 - the worker importing it reports the error
            continue


if __name__ == "__main__":
    preload()
    from pyspark.daemon import manager
    manager()
