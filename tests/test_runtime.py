"""runtime.ray_spark: Ray + Spark (RayDP) start, Arrow -> Spark hand-over, teardown."""

from __future__ import annotations

import os
import sys

import pytest

from runtime import ray_spark as runtime

# these tests start and stop Ray and Spark themselves: after every test that shares the
# session's (tests/conftest.py)
pytestmark = pytest.mark.owns_runtime


@pytest.fixture(autouse=True, scope="module")
def no_leftover_session():
    """The test session's Ray and Spark are stopped: these tests start from nothing."""
    runtime.stop_ray()
    yield
    runtime.stop_ray()


def test_object_store_size_is_bounded():
    gib = 1024**3
    assert runtime.object_store_bytes(24 * gib) <= 8 * gib
    assert runtime.object_store_bytes(24 * gib) >= 256 * 1024**2
    # a small machine gets 30% (unless /dev/shm is smaller still), never below the floor
    assert runtime.object_store_bytes(2 * gib) <= int(0.3 * 2 * gib)
    assert runtime.object_store_bytes(100 * 1024**2) == 256 * 1024**2


def test_missing_java_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))          # no bin/java in there
    with pytest.raises(runtime.RuntimeSetupError, match="JAVA_HOME=.*no bin/java"):
        runtime.java_executable()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(runtime.RuntimeSetupError, match="java not found") as err:
        runtime.start_spark()
    assert "\n" not in str(err.value)


def test_app_master_gets_c1_and_executors_keep_their_jit():
    from runtime.jvm_archive import merge_options
    c1 = "-XX:TieredStopAtLevel=1"
    conf = merge_options(runtime.app_master_jit({}), {})
    master = conf["spark.ray.raydp_app_master.extraJavaOptions"].split()
    assert master == [c1, f"-Dray.job.jvm-options.0={c1}"]
    # Ray puts the job's options first on an executor's command line: Java's default after
    assert conf["spark.executor.extraJavaOptions"].split()[-1] == "-XX:TieredStopAtLevel=4"
    chosen = {"spark.executor.extraJavaOptions": c1}
    assert merge_options(runtime.app_master_jit(chosen), chosen)[
        "spark.executor.extraJavaOptions"] == c1
    own = {"spark.ray.raydp_app_master.extraJavaOptions": "-Dray.job.jvm-options.0=-Xmx1g"}
    assert runtime.app_master_jit(own) == {}
    theirs = {"spark.ray.raydp_app_master.extraJavaOptions": "-XX:TieredStopAtLevel=4"}
    assert merge_options(runtime.app_master_jit(theirs), theirs)[
        "spark.ray.raydp_app_master.extraJavaOptions"].split()[-1] == "-XX:TieredStopAtLevel=4"


def test_bad_spark_sizes_are_refused():
    with pytest.raises(ValueError, match="at least 1 executor"):
        runtime.start_spark(executors=0)


@pytest.mark.slow
def test_arrow_table_from_ray_to_spark_and_back_with_a_stale_session_latest_link(
        tmp_path, monkeypatch):
    """Two claims on one Ray and Spark start (each start costs tens of seconds in CI):

    - a stale session_latest link: RayDP's Java agent in the Spark driver JVM logs under
      ``ray.logging.dir``, by default <ray temp dir>/session_latest/logs; a stale link there
      (a cleaned /tmp) made the driver JVM exit and Spark fail with "Java gateway process
      exited". The driver gets this Ray node's own log directory. The Ray of this test keeps
      its temp dir (and so the link it breaks) in a directory of its own, removed afterwards;
    - `runtime.session`: Spark on that Ray, an Arrow table handed from Ray Data to Spark and
      back, Python UDFs in this interpreter, and everything torn down at the block's end."""
    import shutil
    import tempfile
    from pathlib import Path

    import pyarrow as pa
    import ray

    own = tempfile.mkdtemp(prefix="r")   # short: Ray's socket paths live under it
    monkeypatch.setenv("RAY_TMPDIR", own)
    try:
        runtime.start_ray()
        node = ray._private.worker._global_node
        latest = Path(node.get_temp_dir_path()) / "session_latest"
        assert str(latest).startswith(own)
        os.unlink(latest)
        os.symlink(tmp_path / "cleaned", latest)      # points nowhere now
        # one executor core: Ray Data needs a free CPU to hand the dataset to Spark
        with runtime.session(cores=1) as spark:       # the Ray above: started only once
            assert f"-Dray.logging.dir={node.get_logs_dir_path()}" in \
                spark.conf.get("spark.driver.extraJavaOptions")
            assert spark.range(7).count() == 7
            assert ray.is_initialized() and runtime.ray_is_local()
            assert runtime.spark_shape() == (1, int(ray.cluster_resources()["CPU"]))
            assert runtime.start_spark() is spark          # idempotent while running
            assert os.environ["PYSPARK_PYTHON"] == sys.executable
            # one partition per executor core, at least 2 (runtime.start_spark)
            assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
            assert spark.conf.get("spark.driver.host") == "127.0.0.1"
            n = 10_000
            tbl = pa.table({"group": pa.array([i % 7 for i in range(n)], pa.int32()),
                            "delay": pa.array(range(n), pa.int64())})
            df = ray.data.from_arrow(tbl).to_spark(spark)
            rows = {r["group"]: (r["n"], r["s"]) for r in
                    df.groupBy("group").agg({"delay": "sum", "*": "count"})
                      .withColumnRenamed("count(1)", "n").withColumnRenamed("sum(delay)", "s")
                      .collect()}
            expected = {g: (len(range(g, n, 7)), sum(range(g, n, 7))) for g in range(7)}
            assert rows == expected
            # a Python UDF runs in Spark's Python workers: proves they got this interpreter
            from pyspark.sql import functions as F
            from pyspark.sql.types import StringType
            exe = F.udf(lambda _: sys.executable, StringType())
            assert {r[0] for r in df.limit(3).select(exe("group")).collect()} == \
                {sys.executable}
        assert not ray.is_initialized()
        assert runtime._state["spark"] is None
    finally:
        runtime.stop_ray()
        shutil.rmtree(own, ignore_errors=True)


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="Linux scheduling only")
def test_new_jvms_are_lowered_while_spark_starts_beside_the_emulation(tmp_path):
    """`keep_new_jvms_low`: a JVM started under this process after the lowering began runs
    at SCHED_IDLE (where this user may undo it; else nice 19) within a fraction of a second,
    every thread of it, until the lowering stops; a JVM started after that is left alone."""
    import subprocess
    import threading
    import time

    (tmp_path / "Wait.java").write_text(
        "public class Wait { public static void main(String[] a) throws Exception "
        "{ Thread.sleep(60000); } }")
    java = runtime.java_executable()
    idle = runtime._can_leave_idle()

    def lowered(pid: int) -> bool:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        if idle:
            return all(os.sched_getscheduler(t) == os.SCHED_IDLE for t in tids)
        return all(os.getpriority(os.PRIO_PROCESS, t) == 19 for t in tids)

    def start_jvm():
        p = subprocess.Popen([java, str(tmp_path / "Wait.java")])
        deadline = time.monotonic() + 60     # until the JVM has started its threads
        while len(os.listdir(f"/proc/{p.pid}/task")) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        return p

    stop = threading.Event()
    lowering = runtime.keep_new_jvms_low(stop, every_s=0.05)
    first = later = None
    try:
        first = start_jvm()
        deadline = time.monotonic() + 10
        while not lowered(first.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lowered(first.pid)
        stop.set()
        lowering.join(timeout=5)
        assert not lowering.is_alive()
        later = start_jvm()
        time.sleep(0.3)
        assert os.sched_getscheduler(later.pid) == os.SCHED_OTHER
        assert os.getpriority(os.PRIO_PROCESS, later.pid) == os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        stop.set()
        for p in (first, later):
            if p is not None:
                p.kill()
                p.wait()
