"""runtime.ray_spark: Ray + Spark (RayDP) start, Arrow -> Spark hand-over, teardown."""

from __future__ import annotations

import os
import sys

import pytest

from emulator import heap
from runtime import ray_spark as runtime
from scenarios.analysis_spark import jvm_conf

C1 = jvm_conf("c1", None, None)

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
@pytest.mark.own_process
def test_spark_on_ray_with_a_stale_link_hands_arrow_both_ways_and_writes_class_archives(
        tmp_path, monkeypatch):
    """Three claims on one Ray, two Spark starts (each start costs tens of seconds in CI):

    - a stale session_latest link: RayDP's Java agent in the Spark driver JVM logs under
      ``ray.logging.dir``, by default <ray temp dir>/session_latest/logs; a stale link there
      (a cleaned /tmp) made the driver JVM exit and Spark fail with "Java gateway process
      exited". The driver gets this Ray node's own log directory. The Ray of this test keeps
      its temp dir (and so the link it breaks) in a directory of its own, removed afterwards;
    - `runtime.session`: Spark on that Ray, an Arrow table handed from Ray Data to Spark and
      back, Python UDFs in this interpreter, and everything torn down at the block's end;
    - JVM class archives (runtime/jvm_archive.py): that first session, on an empty cache,
      writes both archives when it stops; the next session's driver loads Spark's classes
      from its archive (Java's own class-load log), and the copies of Ray's Java library
      its JVMs unpacked are gone when Ray stops."""
    import shutil
    import tempfile
    from pathlib import Path

    import pyarrow as pa
    import ray

    cache = tmp_path / "cache"
    monkeypatch.setenv("SCRIBE_EMU_CACHE", str(cache))
    runtime.stop_driver_jvm()       # an earlier test's, which a new session would reuse
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
        # the JIT compiler a run as small gets (`analysis.jit = auto`: C1): the archives do
        # not depend on it, and C2 would spend tens of CPU seconds compiling in each JVM
        with runtime.session(cores=1, configs=C1) as spark:   # on the Ray above: one start
            opts = spark.conf.get("spark.driver.extraJavaOptions")
            assert f"-Dray.logging.dir={node.get_logs_dir_path()}" in opts
            assert "-XX:ArchiveClassesAtExit=" in opts          # an empty cache: it dumps
            assert spark.range(7).count() == 7
            assert ray.is_initialized() and runtime.ray_is_local()
            assert runtime.spark_shape() == (1, int(ray.cluster_resources()["CPU"]))
            assert runtime.start_spark() is spark          # idempotent while running
            assert os.environ["PYSPARK_PYTHON"] == sys.executable
            # one partition per executor core, at least 2 (runtime.start_spark)
            assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
            assert spark.conf.get("spark.driver.host") == "127.0.0.1"
            # the Python workers map large blocks on their own (emulator/heap.py)
            assert spark.conf.get("spark.executorEnv.MALLOC_MMAP_THRESHOLD_") == \
                str(heap.LARGE_BLOCK)
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
        (root,) = (cache / "jvm").iterdir()
        assert sorted(p.name for p in root.iterdir()) == ["driver.jsa", "executor.jsa"]

        runtime.start_ray()
        ray_dir = runtime.JAVA_DRIVER_LIBRARY_DIR
        loads = tmp_path / "class-load.log"
        spark = runtime.start_spark(configs={**C1, "spark.driver.extraJavaOptions":
                                             f"{C1['spark.driver.extraJavaOptions']} "
                                             f"-Xlog:class+load=info:file={loads}"})
        opts = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
        assert f"-XX:SharedArchiveFile={root / 'driver.jsa'}" in opts
        assert spark.range(100).selectExpr("sum(id)").collect()[0][0] == 4950
        shared = [ln for ln in loads.read_text().splitlines() if "org.apache.spark." in ln
                  and "shared objects file (top)" in ln]
        assert len(shared) > 1000, "the driver did not map its class archive"
        runtime.stop_ray()
        assert not [d for d in os.listdir(ray_dir) if d.isdigit() and
                    sorted(os.listdir(os.path.join(ray_dir, d))) ==
                    sorted(runtime.JAVA_LIBRARY_COPY) and
                    os.stat(os.path.join(ray_dir, d)).st_mtime >=
                    runtime._state["ray_started_at"]]
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


@pytest.mark.slow
def test_release_after_a_start_that_failed_frees_the_masters_name():
    """A Spark start that fails part-way (its driver's link broken under load) sets no
    session, but its RayDP master actor keeps the name the next start needs: the lost
    executor's retry (`stop_spark(release=True)`) still clears it."""
    import ray

    runtime.start_ray(None)
    try:
        @ray.remote(num_cpus=0)
        class Stuck:     # a master that was asked nothing and does not exit by itself
            def ping(self):
                return 1

        name = "scribe-emu-release-test"
        master = Stuck.options(name=f"{name}_SPARK_MASTER").remote()
        assert ray.get(master.ping.remote()) == 1
        runtime._state.update(spark=None, spark_app=name,
                              executors_before=set(runtime._executor_actor_states()))
        runtime.stop_spark(release=True, timeout_s=1.0)
        with pytest.raises(ValueError):
            ray.get_actor(f"{name}_SPARK_MASTER")
    finally:
        runtime._state.pop("spark_app", None)
        runtime.stop_ray()
