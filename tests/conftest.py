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


import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402

_warm: subprocess.Popen | None = None
_warm_times = {"waited_s": 0.0}


_ray_tmp: str | None = None


def pytest_configure(config):
    """Ray's sessions (logs, sockets, spilled objects: 20-600 MB each, and Ray removes none)
    go under a temp directory of this test session, removed when it ends, not into the
    machine's /tmp/ray: a suite starts ~20 of them. Children (CLI runs, `ray start`)
    inherit it. The path stays short: Ray's socket paths must fit 107 bytes."""
    global _ray_tmp
    if "RAY_TMPDIR" not in os.environ:
        import tempfile
        _ray_tmp = tempfile.mkdtemp(prefix="se-ray-")
        os.environ["RAY_TMPDIR"] = _ray_tmp


def pytest_unconfigure(config):
    if _ray_tmp is not None:
        import shutil
        shutil.rmtree(_ray_tmp, ignore_errors=True)


def pytest_sessionstart(session):
    """Compile the protocol kernels in a background process at low priority
    (tests/warm_kernels.py: a fresh checkout has no numba cache, and the first protocol
    tests would pay minutes of compiling on the critical path while the analysis tests
    before them leave a core idle). SCRIBE_EMU_WARM=0 turns it off."""
    global _warm
    if os.environ.get("SCRIBE_EMU_WARM", "1") == "0":
        return
    _warm_times["started"] = time.monotonic()
    _warm = subprocess.Popen([sys.executable, str(ROOT / "tests" / "warm_kernels.py")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=lambda: os.nice(10), cwd=ROOT)


def wait_for_warm_kernels() -> None:
    """Let the background compile finish, at normal priority from now on, before a fixture
    runs an emulation in Ray workers: each worker of a cold cache would otherwise compile
    the same kernels again, two shards side by side."""
    if _warm is None or _warm.poll() is not None:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, _warm.pid, 0)
    except OSError:          # not allowed to raise a priority: it finishes at nice 10
        pass
    t0 = time.monotonic()
    try:
        _warm.wait(timeout=900)
    except subprocess.TimeoutExpired:   # the run compiles what is missing itself
        pass
    _warm_times["waited_s"] += time.monotonic() - t0


@pytest.fixture(scope="session")
def warm_kernels() -> None:
    """The background compile has finished (for a test that starts emulations in a process
    of its own)."""
    wait_for_warm_kernels()


_session_start = time.monotonic()


def pytest_terminal_summary(terminalreporter):
    """How the background work went: the compile (a wait here is time with a core idle:
    the tests that need no kernels, BESIDE_THE_COMPILE, were too few to cover it) and the
    background jobs, from and to which second of the session (what they overlapped)."""
    for name, job in _jobs.items():
        if job.span:
            terminalreporter.write_line(
                f"background job {name}: seconds {job.span[0] - _session_start:.0f} to "
                f"{job.span[1] - _session_start:.0f} of the session")
    if _warm is None or "started" not in _warm_times:
        return
    if "ended" in _warm_times:
        terminalreporter.write_line(
            f"background kernel compile: ended at second "
            f"{_warm_times['ended'] - _session_start:.0f} of the session")
    if _warm_times.get("stopped"):
        terminalreporter.write_line("background kernel compile: stopped unfinished at the end")
    else:
        terminalreporter.write_line(
            f"background kernel compile: exit code {_warm.returncode}; the tests waited "
            f"{_warm_times['waited_s']:.1f} s for it")


def pytest_sessionfinish(session, exitstatus):
    with _lock:
        _queue.clear()
    for job in _jobs.values():
        job.stop()
    if _warm is not None and _warm.poll() is None:   # (a short session: leave nothing)
        _warm_times["stopped"] = True
        _warm.kill()
        _warm.wait()


class BackgroundJob:
    """Subprocesses a session's tests will need, run in the background as soon as the
    kernel compile is done (so they load its kernels): such runs wait on Ray's and
    Spark's starts more than they compute, and the tests that start no Ray (run first, in
    one process) leave a core for them. The jobs run one after another, in one thread
    (:func:`background`): each starts Ray shard processes, and two runs' shards side by
    side wait for cores at every window. ``result()`` waits for the job. The processes
    get the session's environment, taken at construction, not that of the test running
    meanwhile (a fast test points RAY_TMPDIR at a directory that must stay empty).
    Subclasses: ``work()``."""

    def __init__(self, base: Path):
        self.base = base
        self._environ = dict(os.environ)
        self._proc: subprocess.Popen | None = None
        self._stopped = False
        self._done = threading.Event()
        self._out: dict = {}
        self.span: tuple[float, float] | None = None    # (start, end), monotonic

    def run(self, argv, timeout=1200, env=None, nice=0) -> subprocess.CompletedProcess:
        """Run one process to its end; its output goes to files (a pipe nobody reads
        meanwhile could fill and stop it). nice: its priority lowered by that much (its
        children inherit it)."""
        env = {**{k: v for k, v in self._environ.items() if k != "SCRIBE_EMU_DEBUG"},
               "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
        self.base.mkdir(parents=True, exist_ok=True)
        out, err = self.base / "stdout", self.base / "stderr"
        with open(out, "w") as o, open(err, "w") as e, subprocess.Popen(
                [str(a) for a in argv], stdout=o, stderr=e, text=True, cwd=ROOT,
                env=env, preexec_fn=(lambda: os.nice(nice)) if nice else None) as proc:
            self._proc = proc
            if self._stopped:
                proc.kill()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return subprocess.CompletedProcess(argv, proc.returncode, out.read_text(),
                                           err.read_text())

    def work(self) -> dict:
        raise NotImplementedError

    def run_now(self) -> None:
        t0 = time.monotonic()
        try:
            self._out = self.work()
        except BaseException as e:     # handed to the tests that wait for it
            self._out = {"error": e}
        finally:
            self.span = (t0, time.monotonic())
            self._done.set()

    def result(self) -> dict:
        self._done.wait()
        if "error" in self._out:
            raise self._out["error"]
        return self._out

    def stop(self) -> None:
        """End a process still going when the session ends (Ctrl-C, -x): as Ctrl-C would,
        so that it stops its Ray; killed if it has not within a minute."""
        self._stopped = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


class QuickRun(BackgroundJob):
    """The session's `quick` run through the CLI, then `analyze` of a copy of it without
    its summary."""

    ARGS = ["scenario", "quick", "--nodes", "300", "--groups", "5", "--seeds", "1..2",
            "--no-progress", "--set", "analysis.warmup=on"]

    def work(self) -> dict:
        cli = [sys.executable, ROOT / "cli.py"]
        run = self.base / "run"
        out = {"run": (run, self.run([*cli, *self.ARGS, "--out", run]))}
        if out["run"][1].returncode == 0:
            copy = self.base / "reanalysed"
            shutil.copytree(run, copy)
            (copy / "summary.json").unlink()
            out["analyze"] = (copy, self.run([*cli, "analyze", copy]))
        return out


class ScriptChild(BackgroundJob):
    """A test module run as a script: its ``__main__`` does the work and prints one JSON
    line of what it found (``found()``). Its processes (Ray's nodes, Spark's executors)
    get a temporary directory of the job's own, and run at priority ``NICE``."""

    SCRIPT = ""
    NICE = 0

    def work(self) -> dict:
        tmp = self.base / "child-tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        return {"child": self.run([sys.executable, ROOT / "tests" / self.SCRIPT, self.base],
                                  env={"TMPDIR": str(tmp)}, nice=self.NICE)}

    def found(self) -> dict:
        res = self.result()["child"]
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
        return json.loads(res.stdout.strip().splitlines()[-1])


class ClusterChild(ScriptChild):
    """tests/test_cluster_event_logs.py: its clusters' runs (the executors of a cluster
    run copy topology files into the job's temporary directory)."""

    SCRIPT = "test_cluster_event_logs.py"


class RayHeadChild(ScriptChild):
    """tests/test_ray_start_head.py: a `ray start --head` and the runs and checks made on
    it. At low priority: it runs beside the session's multi-shard tests, whose shards would
    otherwise wait for a core at every window, and it has until the session's end."""

    SCRIPT = "test_ray_start_head.py"
    NICE = 10


class WarmRun(BackgroundJob):
    """`cli.py warm quick` on a copy of the session's kernel cache (hard links, so it costs
    no copying) without the entries of two kernels, REMOVED: tests/test_warm.py checks
    that the warm-up compiled and cached them again. Its output is that of a terminal
    (the status line drawn). A process of the session that loads a kernel never writes
    into that copy; the warm-up writes new files (numba replaces a cache file, it does not
    write into it), so the session's own cache is left as it was. At low priority, with
    until the session's end."""

    # (kernel source, cache entry prefix): the engine's and Scribe's, cheap to compile
    REMOVED = (("emulator/kernels.py", "kernels.cell_runs-"),
               ("actors/scribe/keyindex.py", "keyindex."))

    def work(self) -> dict:
        from emulator.jit_cache import KERNEL_CACHE_ENV, kernel_cache_dir

        def link_or_copy(src, dst):
            try:
                os.link(src, dst)
            except OSError:     # another filesystem
                shutil.copy2(src, dst)

        source = kernel_cache_dir()
        root = self.base / "numba"
        cache = root / source.name
        shutil.copytree(source, cache, copy_function=link_or_copy)
        removed = {}
        for rel, prefix in self.REMOVED:
            files = list((cache / Path(rel).parent).glob(f"{prefix}*.nb[ic]"))
            for f in files:
                f.unlink()
            removed[prefix] = len(files)
        # (FORCE_COLOR: rich takes the file for a terminal, so the status line is drawn)
        res = self.run([sys.executable, ROOT / "cli.py", "warm", "quick"], timeout=900,
                       env={KERNEL_CACHE_ENV: str(root), "FORCE_COLOR": "1"}, nice=10)
        return {"res": res, "cache": str(cache), "removed": removed}


# the background jobs by the fixture whose tests need them, in the order they run (a job
# is queued when the session's first test starts, if a test of the session asks for its
# fixture)
BACKGROUND = {"quick_run": QuickRun, "cluster_child": ClusterChild,
              "ray_head": RayHeadChild, "warm_run": WarmRun}
_jobs: dict[str, BackgroundJob] = {}
_queue: list[BackgroundJob] = []
_runner: threading.Thread | None = None
_lock = threading.Lock()


def _run_queue() -> None:
    global _runner
    if _warm is not None:
        _warm.wait()
        _warm_times.setdefault("ended", time.monotonic())
    while True:
        with _lock:
            if not _queue:
                _runner = None
                return
            job = _queue.pop(0)
        job.run_now()


def _queue_job(name: str, job: BackgroundJob) -> BackgroundJob:
    """Queue ``job``, and start the thread that runs the queue if none is running."""
    global _runner
    with _lock:
        _jobs[name] = job
        _queue.append(job)
        if _runner is None:
            _runner = threading.Thread(target=_run_queue, daemon=True)
            _runner.start()
    return job


def background_processes() -> set[int]:
    """Pids of the session's background work still running -- its jobs' processes and
    the kernel compile, with all they started (a job's own Ray cluster): separate runs,
    which a test looking at the session's processes leaves out. O(processes)."""
    import psutil
    pids: set[int] = set()
    for proc in [job._proc for job in _jobs.values()] + [_warm]:
        if proc is None or proc.poll() is not None:
            continue
        pids.add(proc.pid)
        try:
            pids |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            pass
    return pids


def background(name: str, tmp_path_factory) -> BackgroundJob:
    """The session's job of ``name`` (queued now if it was not)."""
    if name in _jobs:
        return _jobs[name]
    return _queue_job(name, BACKGROUND[name](tmp_path_factory.mktemp(name)))


# ---- tests in a pytest process of their own, beside the session -------------------------

# set in that process: its tests run there as usual
OWN_PROCESS_ENV = "SCRIBE_EMU_OWN_PROCESS"


class OwnProcessTests(BackgroundJob):
    """The session's tests marked `own_process` (they start and stop a Ray, a Spark and a
    cache of their own, and share nothing with the session's, not even the compile's
    kernels), run by one pytest process of their own in the background from the session's
    start on; their items here report what that run found (pytest_runtest_protocol
    below), so they cost the session no time of its own. At a lower priority than the
    session's tests (and above the compile's): they have until the session's end."""

    def __init__(self, base: Path, nodeids: list[str]):
        super().__init__(base)
        self.nodeids = nodeids

    def work(self) -> dict:
        xml = self.base / "junit.xml"
        res = self.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"--junitxml={xml}", *self.nodeids],
                       env={OWN_PROCESS_ENV: "1", "SCRIBE_EMU_WARM": "0"}, nice=5)
        return {"res": res, "cases": _junit_cases(xml) if xml.is_file() else {}}

    def report(self, item):
        """(outcome, long report, seconds) of ``item`` in that run."""
        out = self.result()
        case = out["cases"].get(item.nodeid)
        if case is None:
            res = out["res"]
            return ("failed", f"not run by its own process (exit {res.returncode}):\n"
                    f"{res.stdout[-3000:]}{res.stderr[-3000:]}", 0.0)
        return case


def _junit_cases(xml: Path) -> dict:
    """{node id: (outcome, long report, seconds)} of a pytest --junitxml file."""
    import xml.etree.ElementTree as ET
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        nodeid = "/".join(module) + ".py::" + case.get("name")
        outcome, text = "passed", None
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                text = el.get("message") or "" if tag == "skipped" else \
                    (el.get("message") or "") + "\n" + (el.text or "")
                break
        out[nodeid] = (outcome, text, float(case.get("time", 0.0)))
    return out


def pytest_runtest_protocol(item, nextitem):
    """A test of OwnProcessTests: reported from its own process, its fixtures not set up
    here."""
    job = _jobs.get("own_process")
    if job is None or item.get_closest_marker("own_process") is None:
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    outcome, text, seconds = job.report(item)
    keywords = {k: 1 for k in item.keywords}
    if outcome == "skipped":
        phases = [("setup", "skipped", (str(item.path), item.location[1] + 1, text.strip()))]
    else:
        phases = [("setup", "passed", None), ("call", outcome, text)]
    for when, result, longrepr in [*phases, ("teardown", "passed", None)]:
        item.ihook.pytest_runtest_logreport(report=pytest.TestReport(
            item.nodeid, item.location, keywords, result, longrepr, when,
            duration=seconds if when == "call" else 0.0))
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


@pytest.fixture(scope="session", autouse=True)
def _background_jobs(request, tmp_path_factory):
    """Start the background jobs the session's tests will need."""
    items = request.session.items
    wanted = set().union(*(getattr(item, "fixturenames", ()) for item in items))
    for name in BACKGROUND:
        if name in wanted:
            background(name, tmp_path_factory)
    own = [item.nodeid for item in items if item.get_closest_marker("own_process")]
    # (a session of those tests alone, or the process running them, runs them itself)
    if own and len(own) < len(items) and not os.environ.get(OWN_PROCESS_ENV):
        # at once, beside the compile: those tests need none of its kernels
        job = _jobs["own_process"] = OwnProcessTests(tmp_path_factory.mktemp("own_process"), own)
        threading.Thread(target=job.run_now, daemon=True).start()
    yield


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory) -> tuple:
    """(run directory, scenario stdout and stderr) of one small `quick` run over two seeds, made
    through the CLI once per session, with Spark started beside the emulation (the warm-up,
    which `auto` leaves off on a 2-CPU machine), and shared by tests/test_cli.py and
    tests/test_report.py (a scenario run costs a Ray and a Spark start; tests may re-analyze
    it, not break it)."""
    wait_for_warm_kernels()
    run, res = background("quick_run", tmp_path_factory).result()["run"]
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return run, res.stdout, res.stderr


@pytest.fixture(scope="session")
def quick_reanalysed(quick_run, tmp_path_factory) -> tuple:
    """(run directory, `analyze` result) of a copy of quick_run whose summary.json was
    removed, analysed again by `cli.py analyze`."""
    return background("quick_run", tmp_path_factory).result()["analyze"]


# ---- one Ray and one Spark for the whole test session ------------------------------------------

# fixtures that start Ray or Spark: a test that asks for one of them must be marked slow
RUNTIME_FIXTURES = {"ray_runtime", "session", "spark", "quick_run", "quick_reanalysed",
                    "reference_runs"}

# Modules whose tests run no emulation and call none of the kernels tests/warm_kernels.py
# compiles (topologies, configuration, reports, Spark analyses of hand-built runs): they go
# first, on one core while the background compile has the other. The first emulation
# (quick_run, reference_runs) then finds the kernels cached instead of waiting for them
# with a core idle. A module left out only runs later; a test here that asks for one of
# KERNEL_FIXTURES runs later too.
BESIDE_THE_COMPILE = {
    "test_analysis", "test_analysis_churn", "test_analysis_partitions",
    "test_analysis_real", "test_analysis_schema", "test_analysis_stats",
    "test_analysis_warmup", "test_bench_report", "test_churn_schedule", "test_cli",
    "test_faults_fast", "test_jit_cache", "test_join_contacts", "test_jvm_archive",
    "test_logs", "test_ngc2001", "test_pastry_ids", "test_report", "test_scale_out",
    "test_scenarios_config", "test_topology", "test_topology_baselines",
    "test_topology_copies", "test_topology_loaders", "test_topology_transit_stub"}
# (warm_kernels: a test that compiles kernels itself, e.g. `cli.py warm`, waits for the
# background compile instead of compiling the same kernels beside it)
KERNEL_FIXTURES = {"session", "quick_run", "quick_reanalysed", "reference_runs",
                   "warm_kernels"}


def _module(item) -> str:
    return Path(str(item.fspath)).stem


def _order(item, late_modules: set[str]) -> tuple[bool, int]:
    """(runs last, group): 0 the tests beside the background compile; 1 the tests that
    start no Ray (one process, one core: the background jobs have the other; a run's
    shards beside those jobs would wait for cores at every window); 2 the other slow
    tests; 3 the slow tests that wait for a background job (`BACKGROUND`: the first of
    them starts after the compile, and a test waiting for it would leave a core idle); 4
    the other tests of a module with a `late` test (they start that test's background
    work); then, last, the tests marked `owns_runtime` (beside that work), the `late`
    tests, and the reports of the tests run by a process of their own."""
    if item.get_closest_marker("own_process") is not None \
            and not os.environ.get(OWN_PROCESS_ENV):
        return True, 2   # (here only reports of a process of their own: wait for it last)
    if item.get_closest_marker("late") is not None:
        return True, 1
    if item.get_closest_marker("owns_runtime") is not None:
        return True, 0
    module = _module(item)
    if module in BESIDE_THE_COMPILE and not KERNEL_FIXTURES & set(item.fixturenames):
        return False, 0
    if module in late_modules:
        return False, 4
    if item.get_closest_marker("slow") is None:
        return False, 1
    return False, 3 if set(BACKGROUND) & set(item.fixturenames) else 2


def pytest_collection_modifyitems(session, config, items):
    """Markers tell the truth, and the tests go in an order that keeps both cores busy.

    A test that asks for a Ray or Spark fixture but is not marked `slow` is an error here,
    before anything runs (`make test-fast`, i.e. -m "not slow", must start neither). Tests
    marked `owns_runtime` stop the session's Ray to start one of their own (a cluster, a
    fresh JVM cache, a private temp dir): they go after every test that shares it. Before
    them the groups of `_order` (the sort keeps file order within a group)."""
    wrong = [item.nodeid for item in items
             if item.get_closest_marker("slow") is None
             and RUNTIME_FIXTURES & set(getattr(item, "fixturenames", ()))]
    if wrong:
        raise pytest.UsageError("tests that start Ray or Spark must be marked slow: "
                                + ", ".join(wrong))
    late = {_module(item) for item in items if item.get_closest_marker("late") is not None}
    items.sort(key=lambda item: _order(item, late))


@pytest.fixture(autouse=True)
def _no_runtime_in_fast_tests(request, monkeypatch, tmp_path_factory):
    """A test not marked `slow` may start no Ray (so no Spark, which runs on it): in this
    process `ray.init` and the runtime's `start_ray` (a no-op while the session's Ray is
    up) raise, and a Ray a child process might start would put its session under a temp
    dir of this test, which must stay empty."""
    if request.node.get_closest_marker("slow") is not None:
        yield
        return
    import ray

    from runtime import ray_spark as runtime

    def refuse(*args, **kwargs):
        raise AssertionError(f"{request.node.nodeid} starts Ray or Spark: mark it slow")

    for obj, name in ((ray, "init"), (runtime, "start_ray")):
        monkeypatch.setattr(obj, name, refuse)
    ray_tmp = tmp_path_factory.mktemp("ray-tmp", numbered=True)
    monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))
    yield
    started = sorted(p.name for p in ray_tmp.iterdir())
    assert not started, f"{request.node.nodeid} started Ray in a child process: mark it slow"


@pytest.fixture(scope="session")
def ray_runtime():
    """The session's embedded Ray (2 CPUs), shared by every test that needs one running; it
    is stopped after the last test (tests marked `owns_runtime` may stop it earlier: they
    run last)."""
    from runtime.ray_spark import start_ray, stop_ray
    start_ray(num_cpus=2)
    yield
    stop_ray()


@pytest.fixture(scope="module")
def session(ray_runtime):
    """Ray running for a module (the session's)."""
    from runtime.ray_spark import start_ray
    start_ray(num_cpus=2)


@pytest.fixture(scope="module")
def spark(ray_runtime):
    """The session's RayDP Spark session (one executor core), started on first use; a
    module whose tests stopped it (a lost executor's session is stopped by the runner)
    leaves the next module a new one. Its JVMs get the JIT compiler the runs get for runs
    as small as the tests' (`analysis.jit = auto`: C1): with C2 a fresh session's JVMs
    spend ~40 CPU seconds compiling during their first small analyses."""
    from pyspark import cloudpickle

    import test_analysis_helpers as hand
    from runtime.ray_spark import start_ray, start_spark
    from scenarios.analysis_spark import jvm_conf
    os.environ["PYSPARK_PYTHON"] = sys.executable
    cloudpickle.register_pickle_by_value(hand)   # workers cannot import tests/
    start_ray(num_cpus=2)
    return start_spark(cores=1, configs=jvm_conf("c1", None, None))   # or the one running


@pytest.fixture(scope="session")
def reference_runs(ray_runtime, tmp_path_factory) -> dict:
    """{shards: run directory} of the session's reference run (tests/runs.py) on 2 shards
    and on 1, each end to end with its analysis. Shared: read them, never change them."""
    from runs import reference_config
    from scenarios import run_scenario
    wait_for_warm_kernels()
    base = tmp_path_factory.mktemp("reference")
    return {k: run_scenario(reference_config(k), out=base / f"k{k}", progress=False)
            for k in (2, 1)}
