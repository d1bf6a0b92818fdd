"""Shared test set-up.

Ray workers import test-only protocol modules (tests/emu_protocols.py) by name when they
unpickle a stack factory, so the repository root and tests/ must be on their PYTHONPATH;
workers inherit the environment of the process that starts Ray.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(ROOT / "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)
_inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), *_inherited])


import subprocess  # noqa: E402

import pytest  # noqa: E402

_warm: subprocess.Popen | None = None


def pytest_sessionstart(session):
    """Compile the protocol kernels in a background process at low priority
    (tests/warm_kernels.py: a fresh checkout has no numba cache, and the first protocol
    tests would pay minutes of compiling on the critical path while the analysis tests
    before them leave a core idle). SCRIBE_EMU_WARM=0 turns it off."""
    global _warm
    if os.environ.get("SCRIBE_EMU_WARM", "1") == "0":
        return
    _warm = subprocess.Popen([sys.executable, str(ROOT / "tests" / "warm_kernels.py")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=lambda: os.nice(10), cwd=ROOT)


def pytest_sessionfinish(session, exitstatus):
    if _warm is not None and _warm.poll() is None:   # (a short session: leave nothing)
        _warm.kill()
        _warm.wait()


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory):
    """(run directory, scenario stdout and stderr) of one small `quick` run over two seeds, made
    through the CLI once per session, with Spark started beside the emulation (the warm-up,
    which `auto` leaves off on a 2-CPU machine), and shared by tests/test_cli.py and
    tests/test_report.py (a scenario run costs a Ray and a Spark start; tests may re-analyze
    it, not break it)."""
    out = tmp_path_factory.mktemp("quick") / "run"
    env = {k: v for k, v in os.environ.items() if k != "SCRIBE_EMU_DEBUG"}
    env.update({"COLUMNS": "200", "NO_COLOR": "1"})
    res = subprocess.run([sys.executable, str(ROOT / "cli.py"), "scenario", "quick", "--nodes",
                          "300", "--groups", "5", "--seeds", "1..2", "--out", str(out),
                          "--no-progress", "--set", "analysis.warmup=on"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return out, res.stdout, res.stderr


@pytest.fixture(scope="module")
def session():
    """A fresh embedded Ray (2 CPUs) for one test module, stopped after it (a module may
    define its own `session` instead, e.g. with Spark)."""
    from emulator.runtime import start_ray, stop_ray
    stop_ray()
    start_ray(num_cpus=2)
    yield
    stop_ray()


@pytest.fixture(scope="module")
def spark(request):
    """A RayDP Spark session (one executor core) on the embedded Ray, for analysis tests.

    Started once for a run of modules that use it: a module's teardown leaves the session up
    when a later module of this test session asks for it too, and stops Ray and Spark after
    the last (a Spark start costs 15-30 s of CI's budget; modules in between that need a
    fresh Ray of their own stop this one first)."""
    import test_analysis_helpers as hand
    from pyspark import cloudpickle

    from emulator.runtime import start_ray, start_spark, stop_ray
    os.environ["PYSPARK_PYTHON"] = sys.executable
    cloudpickle.register_pickle_by_value(hand)   # workers cannot import tests/
    start_ray()
    yield start_spark(cores=1)          # the running session, when an earlier module's is up
    items = request.session.items
    mine = [i for i, item in enumerate(items) if item.module is request.module]
    if not any("spark" in item.fixturenames for item in items[max(mine, default=-1) + 1:]):
        stop_ray()
