"""Faults that must be refused in seconds, before Ray or Spark start: a bad --address
(closed port, not a Ray head, another Ray version), a run that cannot fit in memory, and
the one-line messages of a stopped run. No Ray cluster is started here."""

from __future__ import annotations

import errno
import socket
import threading
import time

import pytest

from runtime import ray_spark as runtime
from scenarios import ScenarioError, load_scenario
from scenarios import runner as runner_mod
from scenarios.analysis_step import spark_lost
from scenarios.memory import check_memory, estimate_memory
from test_cli import assert_bad_input, run_cli


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def silent_server():
    """A TCP port that accepts connections and never answers (not a Ray head)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held = []

    def accept():
        while True:
            try:
                held.append(srv.accept()[0])
            except OSError:
                return
    threading.Thread(target=accept, daemon=True).start()
    yield srv.getsockname()[1]
    srv.close()
    for c in held:
        c.close()


# a hang fails these through pytest-timeout; how fast they fail is not asserted on the
# wall clock (a busy machine), the path they fail on is: the refusal, not a timeout
@pytest.mark.timeout(60)
def test_closed_port_fails_at_once():
    with pytest.raises(runtime.RuntimeSetupError, match="Connection refused") as e:
        runtime.check_cluster_address(f"127.0.0.1:{_closed_port()}", timeout=120)
    assert "\n" not in str(e.value)


@pytest.mark.timeout(60)
def test_port_that_is_not_a_ray_head_fails_within_the_timeout(silent_server):
    with pytest.raises(runtime.RuntimeSetupError, match="not a Ray head"):
        runtime.check_cluster_address(f"127.0.0.1:{silent_server}", timeout=3)


def test_malformed_address_is_refused():
    with pytest.raises(runtime.RuntimeSetupError, match="expected host:port"):
        runtime.check_cluster_address("head-node")


def test_other_ray_or_python_version_is_named():
    import platform

    import ray
    assert runtime.version_mismatch({"ray_version": ray.__version__,
                                     "python_version": platform.python_version()}) is None
    msg = runtime.version_mismatch({"ray_version": "2.9.3",
                                    "python_version": platform.python_version()})
    assert "Ray 2.9.3" in msg and ray.__version__ in msg
    msg = runtime.version_mismatch({"ray_version": ray.__version__, "python_version": "3.10.1"})
    assert "Python 3.10.1" in msg


def test_cli_bad_address_is_one_line_exit_2(tmp_path):
    out = tmp_path / "run"
    res = run_cli("scenario", "quick", "--nodes", "300", "--groups", "10", "--no-progress",
                  "--address", f"127.0.0.1:{_closed_port()}", "--out", out, timeout=60)
    assert_bad_input(res, "cannot connect to the Ray cluster", "Connection refused")
    assert not out.exists()                 # nothing written for a run that never started


def test_memory_estimate_grows_with_the_run():
    small = estimate_memory(load_scenario("quick", nodes=300, groups=10))
    big = estimate_memory(load_scenario("quick", nodes=100_000, groups=1500))
    proto = estimate_memory(load_scenario("quick", nodes=100_000, groups=1500,
                                          bootstrap="protocol"))
    assert small["total"] < big["total"] < proto["total"]
    assert big["node state"] > 100 * small["node state"]


def test_run_that_cannot_fit_is_refused_unless_forced(monkeypatch):
    cfg = load_scenario("quick", nodes=300, groups=10)
    with pytest.raises(ScenarioError, match=r"needs about .* more than this machine's 1\.0 GB"):
        check_memory(cfg, total=1024**3)
    check_memory(cfg, total=1024**3, force=True)        # a warning, no error
    check_memory(cfg, total=1024**4)


def test_cli_absurd_size_is_refused_quickly(tmp_path):
    out = tmp_path / "run"
    res = run_cli("scenario", "quick", "--nodes", "1000000000", "--groups", "10",
                  "--no-progress", "--out", out, timeout=60)
    line = assert_bad_input(res, "memory", "this machine's", "--force")
    assert "TB" in line
    assert not out.exists()


def test_stopped_run_names_the_resume_command(tmp_path):
    e = runner_mod.RunStopped("cannot write x: No space left on device", tmp_path)
    assert str(e).endswith(f"resume with: python cli.py scenario --resume {tmp_path}")
    assert errno.ENOSPC in runner_mod._STORAGE_ERRNOS


def test_resume_needs_no_scenario_name(tmp_path):
    res = run_cli("scenario", timeout=60)
    assert_bad_input(res, "missing scenario NAME", "--resume")
    res = run_cli("scenario", "--resume", tmp_path / "nope", timeout=60)
    assert_bad_input(res, "no such run directory")


def test_spark_executor_loss_is_recognised():
    lost = RuntimeError("Job aborted due to stage failure: Task 0 in stage 3.0 failed 4 "
                        "times, most recent failure: ExecutorLostFailure (executor 0 exited)")
    assert spark_lost(lost)
    wrapped = ValueError("analysis failed")
    wrapped.__cause__ = lost
    assert spark_lost(wrapped)
    assert not spark_lost(KeyError("rad"))


class FakeSpark:
    """What watch_executors reads of a SparkSession: Spark's executor count (block
    managers, the driver's included) and cancelAllJobs."""

    def __init__(self, executors: int):
        self.executors, self.cancelled = executors, 0
        status = type("S", (), {"size": lambda _: self.executors + 1})()
        scala_sc = type("SC", (), {"getExecutorMemoryStatus": lambda _: status})()
        jsc = type("JSC", (), {"sc": lambda _: scala_sc})()
        outer = self
        self.sparkContext = type("Ctx", (), {
            "_jsc": jsc, "cancelAllJobs": lambda _: setattr(outer, "cancelled",
                                                             outer.cancelled + 1)})()


def watch_for(spark: FakeSpark, seconds: float) -> dict:
    with runtime.watch_executors(spark, grace_s=0.3, poll_s=0.05) as fired:
        time.sleep(seconds)
    return fired


def test_executor_watch_fires_on_a_restarting_executor_actor(monkeypatch):
    states = {"old": "DEAD", "a1": "ALIVE"}
    monkeypatch.setattr(runtime, "_executor_actor_states", lambda: dict(states))
    monkeypatch.setitem(runtime._state, "executors_before", set())
    spark = FakeSpark(1)
    assert watch_for(spark, 0.6)["lost"] is None and spark.cancelled == 0
    states["a1"] = "PENDING_CREATION"            # a slow start is not a loss
    assert watch_for(spark, 0.6)["lost"] is None
    states["a1"] = "RESTARTING"                  # what a SIGKILLed executor JVM leaves
    fired = watch_for(spark, 0.8)
    assert "RESTARTING" in fired["lost"] and spark.cancelled == 1


def test_executor_watch_leaves_other_sessions_executors_alone(monkeypatch):
    monkeypatch.setattr(runtime, "_executor_actor_states", lambda: {"theirs": "RESTARTING"})
    monkeypatch.setitem(runtime._state, "executors_before", {"theirs"})
    spark = FakeSpark(1)
    assert watch_for(spark, 0.8)["lost"] is None and spark.cancelled == 0


def test_executor_watch_fires_when_spark_lists_no_executor_any_more(monkeypatch):
    monkeypatch.setattr(runtime, "_executor_actor_states", dict)
    monkeypatch.setitem(runtime._state, "executors_before", set())
    spark = FakeSpark(0)
    assert watch_for(spark, 0.6)["lost"] is None      # none yet: still starting
    spark = FakeSpark(1)
    with runtime.watch_executors(spark, grace_s=0.3, poll_s=0.05) as fired:
        time.sleep(0.2)
        spark.executors = 0
        time.sleep(0.8)
    assert "no executor" in fired["lost"] and spark.cancelled == 1


def test_a_checkpoint_file_is_whole_or_absent(tmp_path):
    """A checkpoint is pickled straight into its file: a write that fails half-way (a full
    disk) leaves neither a half file under the final name nor the temporary one, and a
    finished one reads back the arrays it was given."""
    import pickle

    import numpy as np

    from emulator.storage import Storage

    store = Storage(tmp_path)
    state = {"entries": np.arange(1 << 20, dtype=np.int32), "b": 4}
    with store.writer("checkpoints", "join", "shard0.pkl") as f:
        pickle.dump(state, f, protocol=5)
    with store.reader("checkpoints", "join", "shard0.pkl") as f:
        back = pickle.load(f)
    assert np.array_equal(back["entries"], state["entries"]) and back["b"] == 4
    with pytest.raises(OSError, match="No space"):
        with store.writer("checkpoints", "churn", "shard0.pkl") as f:
            f.write(b"x" * 1000)
            raise OSError(errno.ENOSPC, "No space left on device")
    assert list((tmp_path / "checkpoints" / "churn").iterdir()) == []
