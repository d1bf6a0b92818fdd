"""The one module that starts and stops Ray and Spark (through RayDP).

Everything else (scenarios, analysis, the CLI) asks this module for a running Ray and a
SparkSession, so the settings that make them behave on a small machine (no dashboard,
localhost only, a bounded object store, few shuffle partitions, quiet logs, the right
Python for Spark workers) live in one place.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from emulator import heap
from emulator.errors import first_line

from .jvm_archive import SessionArchives, merge_options

log = logging.getLogger("scribe_emu.runtime")


class RuntimeSetupError(RuntimeError):
    """Ray or Spark cannot be started because of the environment (message is one line)."""


_OBJECT_STORE_FRACTION = 0.30
_OBJECT_STORE_CAP = 8 * 1024**3      # more only helps when shards hold huge logs
_OBJECT_STORE_FLOOR = 256 * 1024**2
# The JVMs' heap caps (a scenario's `analysis.executor_memory` / `driver_memory` default to
# them). A JVM grows its heap to the cap under garbage, so the cap is what it costs the
# machine. The 1,000,000-node run and the 10-topology paper run (1,000,000 node-topologies,
# ~6 M link rows collected) were analysed as fast with these as with 3 GB each
# (docs/analysis.md); Spark spills past the executor's.
EXECUTOR_MEMORY = "1g"
DRIVER_MEMORY = "1g"


def quiet_pyspark_warnings() -> None:
    """Hide pyspark's pre-raise toPandas warning. toPandas warns with the whole Java stack
    trace and then raises the same error; the exception is what we report (one line) or,
    for a cancelled job (the warm-up stopped when the emulation ends), drop, so the warning
    is only noise on the console. Called at import and by `start_spark` (a filter lives in
    the warnings state of its time: a caller's `warnings.catch_warnings()` block, e.g.
    pytest's around every test, drops one added inside it)."""
    warnings.filterwarnings("ignore", message="toPandas attempted Arrow optimization",
                            category=UserWarning)


quiet_pyspark_warnings()

_state = {"ray_started_here": False, "spark": None}


def object_store_bytes(total_memory: int | None = None) -> int:
    """Object-store size for an embedded Ray: 30% of RAM, at least 256 MB, at most 8 GB,
    and never more than /dev/shm can hold (Ray would fall back to slow disk files)."""
    if total_memory is None:
        import psutil
        total_memory = psutil.virtual_memory().total
    size = int(total_memory * _OBJECT_STORE_FRACTION)
    with contextlib.suppress(OSError):
        shm = shutil.disk_usage("/dev/shm").free
        if shm >= _OBJECT_STORE_FLOOR:
            # Ray keeps a little of /dev/shm for itself; stay 10% under what is free.
            size = min(size, int(shm * 0.9))
    return max(_OBJECT_STORE_FLOOR, min(size, _OBJECT_STORE_CAP))


def start_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to the Ray cluster at `address` (or $RAY_ADDRESS), or start an embedded one.

    The embedded Ray has no dashboard, listens on 127.0.0.1 only (`_loopback_only`), logs
    at WARNING into its session directory, not the console (`_stderr_to_file`; actor
    errors still reach the driver as exceptions) and gets a bounded object store. A cluster
    address is checked first (`check_cluster_address`): a closed port, something that is
    not a Ray head or another Ray version fail within seconds with one line.
    Calling it again while Ray is up is a no-op.
    """
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")   # no prompt, no phone-home
    # Ray Data (the Arrow -> Spark hand-over) logs every dataset execution at INFO.
    os.environ.setdefault("RAY_DATA_LOG_LEVEL", "WARNING")
    _quiet_ray_data()
    address = address or os.environ.get("RAY_ADDRESS") or None
    common = dict(ignore_reinit_error=True, logging_level=logging.WARNING,
                  log_to_driver=False)
    if address:
        check_cluster_address(address)
        try:
            with _stderr_to_file(_console_log_path()):
                ray.init(address=address, **common)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RuntimeSetupError(f"cannot connect to the Ray cluster at {address!r}: "
                                    f"{first_line(exc)}") from None
        _state["ray_started_here"] = False
        return
    if num_cpus is not None and num_cpus < 1:
        raise ValueError(f"num_cpus must be at least 1, got {num_cpus}")
    # RAY_ADDRESS="" in the environment would make ray.init look for a cluster.
    os.environ.pop("RAY_ADDRESS", None)
    # Token auth stays on (Ray's default for a new local cluster); only its "is enabled"
    # notice is dropped, a disabled-auth warning (mode set by the user) still shows.
    logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(
        lambda rec: "Token authentication is enabled" not in rec.getMessage())
    _loopback_only()
    with _stderr_to_file(_console_log_path()):
        # "local": a new Ray of our own even when `ray start` left a cluster address in
        # /tmp/ray (ray.init() with no address would join that cluster)
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                 dashboard_host=LOOPBACK, _node_ip_address=LOOPBACK,
                 object_store_memory=object_store_bytes(), **common)
    _state["ray_started_here"] = True
    _state["ray_started_at"] = time.time()


# ---- loopback only (embedded runtime) -------------------------------------------------------

LOOPBACK = "127.0.0.1"


def _loopback_only() -> None:
    """Make every process of an embedded Ray + Spark listen on 127.0.0.1 only.

    Ray turns ``_node_ip_address="127.0.0.1"`` into the machine's routable address unless
    its "no cluster" mode (the macOS/Windows default) is on; in that mode the GCS, raylet,
    agents and core workers of every Python/Java worker bind loopback. The variable is
    inherited by everything Ray and RayDP start; the constant is patched too because Ray
    reads it at import. Spark's JVMs (driver, RayDP master, executors) bind SPARK_LOCAL_IP.
    """
    if "loopback_saved" not in _state:      # what to put back when this Ray stops
        _state["loopback_saved"] = {k: os.environ.get(k) for k in _LOOPBACK_ENV}
    os.environ.update(_LOOPBACK_ENV)
    _set_ray_cluster_mode(False)


_LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "SPARK_LOCAL_IP": LOOPBACK}


def _set_ray_cluster_mode(on: bool) -> None:
    with contextlib.suppress(ImportError, AttributeError):
        import ray._private.ray_constants as ray_constants
        ray_constants.ENABLE_RAY_CLUSTER = on


def _undo_loopback_only() -> None:
    """After an embedded Ray stops, a later connection to a cluster from this process must
    announce the node's routable address again."""
    saved = _state.pop("loopback_saved", None)
    if saved is None:
        return
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _set_ray_cluster_mode(sys.platform not in ("darwin", "win32"))


def _loopback_spark_conf() -> dict[str, str]:
    """Spark settings that keep the driver's RPC and block manager on loopback (the UI is
    off altogether in start_spark)."""
    return {"spark.driver.bindAddress": LOOPBACK, "spark.driver.host": LOOPBACK}


# ---- a clean console --------------------------------------------------------------------------

def _console_log_path() -> Path:
    """Where Ray's and Spark's own console output goes: Ray's session log directory once Ray
    runs (logs/scribe-emu-console.log), the temp directory before."""
    import tempfile

    import ray
    with contextlib.suppress(Exception):
        if ray.is_initialized():
            node = ray._private.worker._global_node
            if node is not None:
                return Path(node.get_logs_dir_path()) / "scribe-emu-console.log"
    return Path(tempfile.gettempdir()) / f"scribe-emu-console-{os.getuid()}.log"


@contextlib.contextmanager
def _stderr_to_file(path: Path) -> Iterator[None]:
    """Send file descriptor 2 to `path` for the block: the processes started meanwhile (Ray's
    C++ parts, Spark's driver JVM, whose Ray core worker logs `gcs_client.cc` INFO lines to
    stderr) keep writing there for their whole life; this process gets its stderr back."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):       # no real fd 2 (e.g. captured by a test runner)
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        os.close(saved)
        yield
        return
    try:
        os.dup2(fd, 2)
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


# ---- a cluster address that answers ---------------------------------------------------------

ADDRESS_CHECK_TIMEOUT_S = 8.0

_GCS_PROBE = r"""
import json, os, sys
try:
    import ray
    import ray._private.ray_constants as rc
    from ray._raylet import GcsClient
    from ray.exceptions import AuthenticationError

    def metadata():
        gcs = GcsClient(address=sys.argv[1])
        return gcs.internal_kv_get(b"CLUSTER_METADATA", namespace=rc.KV_NAMESPACE_CLUSTER)

    out = {}
    try:
        raw = metadata()
    except AuthenticationError:
        # Ray turns token mode on by itself only for a head it starts or finds locally; a
        # client given an address must ask for it. Ask again in token mode when the user
        # left the mode unset and this machine holds a token.
        if os.environ.get("RAY_AUTH_MODE") is not None:
            raise
        from ray._private.authentication.authentication_token_setup import _enable_token_auth
        from ray._raylet import AuthenticationTokenLoader
        if not AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True):
            raise
        _enable_token_auth()
        out["auth"] = "token"
        raw = metadata()
    meta = json.loads(raw.decode()) if raw else {}
    out.update(ray_version=meta.get("ray_version"), python_version=meta.get("python_version"))
except Exception as e:
    text = str(e).strip()
    out = {"error": type(e).__name__, "message": text.splitlines()[0][:300] if text else ""}
print("SCRIBE-EMU-GCS " + json.dumps(out))
"""


def check_cluster_address(address: str, timeout: float = ADDRESS_CHECK_TIMEOUT_S) -> None:
    """Fail fast, with one line, unless a Ray head of this Ray and Python version answers
    at `address` (host:port, or "auto" for the cluster this machine belongs to).

    Ray's own ray.init retries an unreachable address for minutes, printing a warning every
    few seconds; here a TCP probe finds a closed port at once and a GCS query in a child
    process (its output discarded, killed after `timeout` s) finds something that is not
    a Ray head or a different version. Ray Client addresses (ray://) get the TCP probe only.
    """
    import socket
    import subprocess

    target = address
    if address == "auto":
        target = _local_cluster_address()
    client = target.startswith("ray://")
    hostport = target.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise RuntimeSetupError(f"--address {address!r}: expected host:port (e.g. "
                                "head-node:6379), ray://host:port or auto")
    where = f"the Ray cluster at {address!r}"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=min(3.0, timeout)):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if isinstance(exc, socket.timeout):
            reason = "no answer within 3 s"
        raise RuntimeSetupError(f"cannot connect to {where}: {reason} (is a Ray head running "
                                "there? `ray start --head` starts one)") from None
    if client:
        return
    try:
        res = subprocess.run([sys.executable, "-c", _GCS_PROBE, hostport], capture_output=True,
                             text=True, timeout=timeout, env=_probe_env())
    except subprocess.TimeoutExpired:
        raise RuntimeSetupError(f"cannot connect to {where}: the port is open but no Ray GCS "
                                f"answered within {timeout:.0f} s (not a Ray head?)") from None
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("SCRIBE-EMU-GCS ")), None)
    answer = json.loads(line.split(" ", 1)[1]) if line else {"error": "no answer"}
    if answer.get("error") == "AuthenticationError":
        raise RuntimeSetupError(f"cannot connect to {where}: {_token_problem()}")
    if answer.get("auth") == "token":
        # Token mode for this process and everything it starts (the Spark driver's JVM,
        # whose Ray core worker talks to the GCS too), as Ray sets it for a head it starts.
        # The cluster's own workers and job drivers get the mode from their raylet.
        from ray._private.authentication.authentication_token_setup import _enable_token_auth
        _enable_token_auth()
    if "error" in answer:
        raise RuntimeSetupError(f"cannot connect to {where}: the port is open but it does not "
                                "answer as a Ray GCS (not a Ray head?)")
    problem = version_mismatch(answer)
    if problem:
        raise RuntimeSetupError(f"cannot use {where}: {problem}")


AUTH_MODE_ENV = "RAY_AUTH_MODE"


def _token_source() -> str | None:
    """Where Ray's token loader finds this machine's authentication token, in words, or
    None when it finds none. Ray's loader answers only whether it has one; its order (the
    variable RAY_AUTH_TOKEN, else the file RAY_AUTH_TOKEN_PATH names, else
    ~/.ray/auth_token) says which source that was."""
    from ray._private.authentication.authentication_token_setup import (
        _get_default_token_path,
    )
    from ray._raylet import AuthenticationTokenLoader
    from ray.exceptions import AuthenticationError

    loader = AuthenticationTokenLoader.instance()
    loader.reset_cache()         # it keeps what it loaded; read the sources as they are now
    try:
        if not loader.has_token(ignore_auth_mode=True):
            return None
    except AuthenticationError:  # RAY_AUTH_TOKEN_PATH names an unreadable or empty file
        return None
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "the variable RAY_AUTH_TOKEN"
    named = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return f"RAY_AUTH_TOKEN_PATH={named}" if named else str(_get_default_token_path())


_GET_TOKEN = ("put the cluster's token (`ray get-auth-token` on the head prints it) in "
              "~/.ray/auth_token, in the variable RAY_AUTH_TOKEN, or in a file named by "
              "RAY_AUTH_TOKEN_PATH")


def _token_problem() -> str:
    """Why a head that wants an authentication token refused this machine, and the fix."""
    mode = os.environ.get(AUTH_MODE_ENV)
    named = os.environ.get("RAY_AUTH_TOKEN_PATH")
    source = _token_source()
    if mode is not None and mode.lower() != "token":
        return (f"the Ray head wants an authentication token but {AUTH_MODE_ENV}={mode} here; "
                f"unset {AUTH_MODE_ENV} (or set it to token)" +
                ("" if source else f" and {_GET_TOKEN}"))
    if source is None and named and not os.environ.get("RAY_AUTH_TOKEN"):
        return (f"the Ray head wants an authentication token and RAY_AUTH_TOKEN_PATH={named} "
                "cannot be read or is empty; " + _GET_TOKEN)
    if source is None:
        return f"the Ray head wants an authentication token and this machine has none; {_GET_TOKEN}"
    return (f"the Ray head rejected the authentication token from {source}: it is not this "
            "cluster's token; replace it with the cluster's (`ray get-auth-token` on the head "
            "prints it; RAY_AUTH_TOKEN, when set, comes before the files)")


def version_mismatch(meta: dict) -> str | None:
    """A one-line description of why a cluster with metadata `meta` (its Ray and Python
    versions) cannot run this process's code, or None when it can. Ray needs the same Ray
    version and the same Python version (to the patch level) on the driver and cluster."""
    import platform

    import ray
    mine = (ray.__version__, platform.python_version())
    theirs = (meta.get("ray_version"), meta.get("python_version"))
    if None in theirs or theirs == mine:
        return None
    return (f"version mismatch: the cluster runs Ray {theirs[0]} on Python {theirs[1]}, this "
            f"process Ray {mine[0]} on Python {mine[1]}; install the cluster's versions here "
            "(or run from a node of the cluster)")


def _probe_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env["RAY_BACKEND_LOG_LEVEL"] = "error"
    return env


def _local_cluster_address() -> str:
    """The address `ray start` on this machine recorded (what address="auto" means)."""
    import ray._private.services as services
    try:
        found = services.get_ray_address_from_environment("auto", None)
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, ValueError, ...
        raise RuntimeSetupError(f"--address auto: no running Ray cluster found on this "
                                f"machine ({first_line(exc)})") from None
    if not found:
        raise RuntimeSetupError("--address auto: no running Ray cluster found on this machine")
    return found


def _quiet_ray_data() -> None:
    """Drop Ray Data's INFO console lines and progress bars if it is already imported
    (otherwise RAY_DATA_LOG_LEVEL does it at import)."""
    if "ray.data" not in sys.modules:
        return
    import ray.data
    logger = logging.getLogger("ray.data")
    if logger.level < logging.WARNING:
        logger.setLevel(logging.WARNING)
    with contextlib.suppress(Exception):
        ray.data.DataContext.get_current().enable_progress_bars = False


def ray_is_local() -> bool:
    """True when the running Ray was started by this process (embedded, one machine)."""
    return bool(_state["ray_started_here"])


def java_executable() -> str:
    """Path of the `java` Spark will use ($JAVA_HOME/bin/java, else the one on PATH).

    Raises RuntimeSetupError with the fix when there is none."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        cand = Path(java_home) / "bin" / "java"
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
        raise RuntimeSetupError(f"JAVA_HOME={java_home} has no bin/java; point JAVA_HOME at "
                                "a Java 17 install or unset it (`make java` installs OpenJDK 17)")
    found = shutil.which("java")
    if not found:
        raise RuntimeSetupError("java not found: Spark needs Java 17; run `make java` (as root: "
                                "apt-get install openjdk-17-jre-headless) or set JAVA_HOME")
    return found


_LOG4J2 = """\
# Errors only. Spark announces "Setting default log level" unless the root level equals the
# level configured for its shell logger (under org.apache.spark): both are ERROR here.
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.spark.name = org.apache.spark
logger.spark.level = error
logger.sparkproject.name = org.sparkproject
logger.sparkproject.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.ray.name = io.ray
logger.ray.level = error
"""


def _log4j2_file() -> Path:
    import tempfile
    path = Path(tempfile.gettempdir()) / f"scribe-emu-log4j2-{os.getuid()}.properties"
    if not path.is_file() or path.read_text() != _LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2)
        os.replace(tmp, path)
    return path


def spark_shape() -> tuple[int, int]:
    """(executors, cores each) for the Ray cluster this process is connected to: one
    executor per live node with CPUs, as many cores as the smallest such node has. The
    emulator's shard actors reserve no CPU and are gone by the time the analysis runs, so
    the analysis can use every core (on a 2-core laptop: 2 Python workers, not 1)."""
    import ray
    cpus = [int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]
    cpus = [c for c in cpus if c >= 1]
    if not cpus:
        return 1, 1
    return len(cpus), min(cpus)


def spark_running() -> bool:
    """Whether this process has a Spark session on the Ray it is connected to."""
    import ray
    return (_state["spark"] is not None and ray.is_initialized()
            and _state.get("spark_ray") == _ray_session())


def start_spark(app_name: str = "scribe-emu", executors: int | None = None,
                cores: int | None = None, memory: str = EXECUTOR_MEMORY,
                configs: dict[str, str] | None = None, driver_memory: str = DRIVER_MEMORY,
                class_archive: bool = True):
    """A SparkSession whose executors are Ray actors (RayDP); starts Ray if needed.
    ``executors``/``cores`` None: `spark_shape()` of the cluster. ``memory``: per executor;
    ``driver_memory``: the Spark driver JVM's (`--set analysis.*` of a scenario).
    ``class_archive``: on an embedded Ray, map the JVM class archives of an earlier session
    or write them when this one stops (runtime/jvm_archive.py).

    Returns the running session when one was already started here.
    """
    if (executors is not None and executors < 1) or (cores is not None and cores < 1):
        raise ValueError(f"Spark needs at least 1 executor with 1 core, got "
                         f"executors={executors}, cores={cores}")
    import ray
    if spark_running():
        return _state["spark"]
    _state["spark"] = None      # none, or the Ray it ran on was shut down: that session is gone
    java = java_executable()
    if not ray.is_initialized():
        start_ray()
    import ray.data
    import raydp

    if executors is None or cores is None:
        auto_exec, auto_cores = spark_shape()
        executors = auto_exec if executors is None else executors
        cores = auto_cores if cores is None else cores
    ray.data.DataContext.get_current().enable_progress_bars = False
    _quiet_ray_data()
    # Spark's Python workers must be this interpreter (the venv), or they cannot import
    # pyspark/analysis; the env vars cover the driver, the confs cover remote executors.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    conf = {
        # one shuffle partition per executor core: the default 200 tiny tasks dominate run
        # time on a laptop, and a cluster's cores all get work
        "spark.sql.shuffle.partitions": str(max(2, executors * cores)),
        "spark.driver.memory": driver_memory,
        # pandas <-> Spark through Arrow (the analysis collects every result with toPandas
        # and runs its numpy kernels in grouped maps)
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": sys.executable,
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        # the Python workers' freed tables go back to the OS (emulator/heap.py), and so
        # do those of this process, which collects every result
        **{f"spark.executorEnv.{k}": v for k, v in heap.LARGE_BLOCK_ENV.items()},
    }
    heap.map_large_blocks()
    if ray_is_local():
        # On an embedded Ray everything is on this host; elsewhere RayDP picks the node IP
        # so that executors on other machines can reach the driver.
        conf.update(_loopback_spark_conf())
        _loopback_only()
    # RayDP points the driver JVM at a log4j2 file that does not exist (log4j then prints
    # an error and Spark's INFO/WARN banner); give it one that logs errors only.
    conf["spark.log4j.config.file.name"] = str(_log4j2_file())
    conf.update(configs or {})
    conf = merge_options(merge_options(app_master_jit(conf), conf), _driver_log_dir())
    archives = _session_archives(java, executors) if class_archive and ray_is_local() else None
    if archives is not None:
        conf = merge_options(conf, archives.options())
    # RayDP's fault-tolerant mode is refused under Ray Client (ray://...); it only matters
    # for recovering Spark data after an executor loss, which a re-run replaces.
    client = False
    with contextlib.suppress(Exception):
        import ray.util.client
        client = bool(ray.util.client.ray.is_connected())
    # the executor actors this session will create are the ones not listed now
    _state["executors_before"] = set(_executor_actor_states())
    _state["spark_app"] = app_name   # (named before the start: a failed one leaves actors)
    try:
        # the driver JVM inherits fd 2: its Ray core worker's INFO lines go to Ray's logs
        with _stderr_to_file(_console_log_path()), _driver_jvm_beside_master():
            spark = raydp.init_spark(app_name, executors, cores, memory, configs=conf,
                                     fault_tolerant_mode=not client)
    except Exception as exc:
        raise RuntimeSetupError(f"cannot start Spark on Ray (RayDP): {first_line(exc)}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    quiet_pyspark_warnings()
    if not ray_is_local():
        _state["code_dir"] = _ship_project_code(spark)
    _state["spark"] = spark
    _state["archives"] = archives
    _state["spark_ray"] = _ray_session()
    return spark


def _driver_log_dir() -> dict[str, str]:
    """The Spark driver JVM's ``ray.logging.dir``: this Ray node's log directory. RayDP
    gives it to its master and executor JVMs but not to the driver, whose Java agent then
    logs under /tmp/ray/session_latest/logs and exits ("Error create log dir.", which
    PySpark reports as "Java gateway process exited") when that link is stale, e.g. after
    /tmp/ray was cleaned. {} when this process has no Ray node (Ray Client)."""
    try:
        import ray._private.worker
        logs = ray._private.worker._global_node.get_logs_dir_path()
    except Exception:  # noqa: BLE001 - no local node: the agent's own default
        return {}
    value = f'"{logs}"' if any(c.isspace() for c in logs) else logs
    return {"spark.driver.extraJavaOptions": f"-Dray.logging.dir={value}"}


# RayDP's app master is two JVMs (a Py4J gateway and a Ray Java actor it creates) that start,
# answer a handful of calls and then wait: the client compiler alone spends less start-up
# CPU on code they hardly run again (benchmarks/bench_analysis.py measures Spark's start).
_C1 = "-XX:TieredStopAtLevel=1"
_APP_MASTER_OPTIONS = "spark.ray.raydp_app_master.extraJavaOptions"


def app_master_jit(conf: dict[str, str]) -> dict[str, str]:
    """Java options (merged before `conf`'s own) that give RayDP's app master JVMs the client
    compiler. The actor gets them as its Ray job's JVM options (`ray.job.jvm-options`), which
    Ray also puts first on the executors' command lines: an executor with no JIT choice of
    its own gets Java's default back explicitly (the last option wins)."""
    if "ray.job.jvm-options" in conf.get(_APP_MASTER_OPTIONS, ""):
        return {}       # the user gave the Ray job's JVM options: theirs alone
    extra = {_APP_MASTER_OPTIONS: f"{_C1} -Dray.job.jvm-options.0={_C1}"}
    if "TieredStopAtLevel" not in conf.get("spark.executor.extraJavaOptions", ""):
        extra["spark.executor.extraJavaOptions"] = "-XX:TieredStopAtLevel=4"
    return extra


@contextlib.contextmanager
def _driver_jvm_beside_master() -> Iterator[None]:
    """Launch the Spark driver's JVM while RayDP starts its app master.

    RayDP starts the two one after the other (the driver needs the master's URL), but
    only the SparkContext needs that URL, not the JVM: its launch (spark-submit's launcher
    JVM, then the driver JVM, ~1 s) depends only on the settings RayDP has prepared by
    then. So while `SparkCluster._set_up_master` runs, a thread launches the gateway with
    those settings and PySpark's SparkContext then finds it up (less time per Spark start:
    benchmarks/bench_analysis.py measures it). The SparkContext gets every setting again,
    the master's URL included. Should RayDP change and the hook be missing, Spark starts
    without the early launch; should the start fail, a gateway no SparkContext uses is
    shut down.
    """
    try:
        from pyspark import SparkConf, SparkContext
        from raydp.spark import ray_cluster
        original = ray_cluster.SparkCluster._set_up_master
    except (ImportError, AttributeError):
        yield
        return

    def launch(conf) -> None:
        try:
            SparkContext._ensure_initialized(conf=conf)
        except Exception:  # noqa: BLE001 - SparkContext launches it again and reports why
            log.info("launching the Spark driver JVM early failed", exc_info=True)

    def set_up_master(cluster, *args, **kwargs):
        conf = SparkConf(loadDefaults=False).setAll(list(cluster._configs.items()))
        thread = threading.Thread(target=launch, args=(conf.setAppName(cluster._app_name),),
                                  name="spark-driver-jvm", daemon=True)
        thread.start()
        try:
            return original(cluster, *args, **kwargs)
        finally:
            thread.join()

    ray_cluster.SparkCluster._set_up_master = set_up_master
    try:
        yield
    except BaseException:
        gateway = SparkContext._gateway
        if gateway is not None and SparkContext._active_spark_context is None:
            with contextlib.suppress(Exception):
                gateway.shutdown()
                gateway.proc.kill()
            SparkContext._gateway = SparkContext._jvm = None
        raise
    finally:
        ray_cluster.SparkCluster._set_up_master = original


PROJECT_PACKAGES = ("analysis", "topologies")   # what the executors' Python code imports


def _ship_project_code(spark) -> Path:
    """Give the executors' Python workers this process's project packages (a zip through
    `addPyFile`): on a cluster they need not have the checkout at the same path, e.g. under
    `ray job submit --working-dir .`, whose directory differs from node to node. Returns
    the zip's directory, which the driver serves the zip from until Spark stops."""
    import tempfile
    import zipfile
    root = Path(__file__).resolve().parent.parent
    path = Path(tempfile.mkdtemp(prefix="scribe-emu-code-")) / "scribe_emu_code.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for package in PROJECT_PACKAGES:
            for f in sorted((root / package).rglob("*.py")):
                z.write(f, f.relative_to(root).as_posix())
    spark.sparkContext.addPyFile(str(path))
    return path.parent


@contextlib.contextmanager
def watch_executors(spark, grace_s: float = 30.0, poll_s: float = 2.0) -> Iterator[dict]:
    """Cancel Spark's jobs once an executor of this Spark session is lost for `grace_s`
    seconds, so that a lost executor becomes an error the caller can answer (a new Spark
    session, the step again) instead of a wait with no end.

    What a SIGKILLed executor JVM does (RayDP 1.6, tried): Ray restarts its actor (RayDP
    creates executors with restarts allowed); the new executor may rejoin (Spark then
    reruns the lost tasks), or exit again while re-registering, the actor cycling through
    RESTARTING for as long as one waits (seen when the kill came before the executor had
    registered with the driver); then Spark's jobs stay queued and no error ever reaches
    the driver. So the watch reads the executors' actor states from Ray's GCS
    (`raydp-executor-*` actors created after the watch began or alive then): one that is
    not ALIVE for `grace_s` s, or Spark listing no executor for `grace_s` s after it had
    one, is a loss. Yields a dict whose ``"lost"`` names the loss once it fired."""
    import threading
    import time

    fired: dict = {"lost": None}
    stop = threading.Event()
    sc = spark.sparkContext
    # executor actors that existed before this session (earlier sessions', other jobs'
    # on a shared cluster) are not watched
    earlier = _state.get("executors_before", set()) | {
        aid for aid, state in _executor_actor_states().items() if state == "DEAD"}

    def spark_executors() -> int:
        # the block managers Spark knows: the executors' and the driver's own
        return int(sc._jsc.sc().getExecutorMemoryStatus().size()) - 1

    def watch() -> None:
        seen, none_since, down_since = False, None, {}
        while not stop.wait(poll_s):
            try:
                n = spark_executors()
            except Exception:  # noqa: BLE001 - Spark stopping under us: nothing to watch
                return
            states = {a: s for a, s in _executor_actor_states().items() if a not in earlier}
            now = time.monotonic()
            seen = seen or n > 0
            none_since = None if (n > 0 or not seen) else (none_since or now)
            # PENDING_CREATION: still starting (slow under load), not lost
            down = {a for a, s in states.items() if s in ("RESTARTING", "DEAD")}
            down_since = {a: down_since.get(a, now) for a in down}
            lost = None
            if none_since is not None and now - none_since >= grace_s:
                lost = f"Spark has had no executor for {grace_s:.0f} s"
            elif any(now - t >= grace_s for t in down_since.values()):
                worst = min(down_since, key=down_since.get)
                lost = (f"a Spark executor's Ray actor has been {states[worst]} "
                        f"for {grace_s:.0f} s (its process died)")
            if lost:
                fired["lost"] = lost
                with contextlib.suppress(Exception):
                    sc.cancelAllJobs()
                return

    thread = threading.Thread(target=watch, name="scribe-emu-executor-watch", daemon=True)
    thread.start()
    try:
        yield fired
    finally:
        stop.set()
        thread.join(timeout=poll_s + 5)


def _executor_actors() -> dict[str, dict]:
    """{actor id: its row} of RayDP's executor actors in the Ray cluster's actor table, or
    {} when it cannot be read (e.g. under Ray Client: Spark's own executor count then
    serves alone). Ray's state API needs the dashboard (off here); the GCS table does not."""
    import ray._private.state
    try:
        actors = ray._private.state.actors()
    except Exception:  # noqa: BLE001 - whatever Ray raises, there is nothing to read
        return {}
    return {aid: a for aid, a in actors.items()
            if str(a.get("Name", "")).startswith("raydp-executor-")}


def _executor_actor_states() -> dict[str, str]:
    """{actor id: state} of RayDP's executor actors ({} when unreadable)."""
    return {aid: a.get("State", "") for aid, a in _executor_actors().items()}


def _spark_jvm_pids() -> set[int]:
    """This process's Spark JVMs: the driver JVM (a child of this process) and RayDP's
    master and executor actors (Ray's GCS actor table)."""
    import psutil
    import ray._private.state
    pids = {p.pid for p in psutil.Process().children(recursive=True) if p.name() == "java"}
    try:
        pids |= {int(a.get("Pid") or 0) for a in ray._private.state.actors().values()
                 if str(a.get("Name", "")).lower().startswith("raydp")
                 and a.get("State") == "ALIVE"}
    except Exception:  # noqa: BLE001 - the GCS table unreadable: the driver JVM alone
        pass
    return pids - {0}


def _each_thread(pids, apply) -> int:
    """apply(tid) to every thread of these processes (Linux schedules threads: the JVM's
    compiler and GC threads exist from its start); returns the processes reached."""
    reached = 0
    for pid in sorted(pids):
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                apply(int(tid))
            reached += 1
        except (OSError, ValueError):   # gone meanwhile, or no /proc (not Linux)
            continue
    return reached


def _can_leave_idle() -> bool:
    """Whether this user may move a thread out of SCHED_IDLE again (root, or RLIMIT_NICE
    allowing Ray's worker nice 15: Linux refuses it otherwise)."""
    import resource
    return os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20 - 15


def _lowerer():
    """tid -> None that lowers one thread as Spark's JVMs are lowered beside the emulation:
    SCHED_IDLE where `restore_spark_priority` can undo it, else nice 19 (below Ray's
    workers, which Ray starts at nice 15, the shards included)."""
    if _can_leave_idle():
        return lambda tid: os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    return lambda tid: os.setpriority(os.PRIO_PROCESS, tid, 19)


def lower_this_thread() -> None:
    """This thread, and every thread and process it starts from now on, at the priority
    `lower_spark_priority` gives Spark's JVMs (SCHED_IDLE where `restore_spark_priority`
    can undo it, else nice 19). For starting Spark beside the emulation: the driver JVM
    and spark-submit's launcher are children of this process, at its nice 0, and would take
    the CPU from the shards (Ray runs them at nice 15) while they start and compile."""
    if not hasattr(os, "sched_setscheduler"):
        return
    try:
        _lowerer()(threading.get_native_id())
    except OSError:    # not allowed here: Spark starts at normal priority
        log.info("could not lower the Spark start's priority", exc_info=True)


def keep_new_jvms_low(stop: threading.Event, every_s: float = 0.1) -> threading.Thread:
    """A daemon thread that, until `stop` is set, gives every JVM this process has started
    (spark-submit's launcher and the driver, its children; RayDP's master and executors,
    children of the embedded Ray's raylet, a child of this process) the priority of
    `lower_spark_priority` within `every_s` of its start: Ray starts them at the shards'
    nice 15, and a JVM's start-up (class loading, JIT threads) then takes its share of the
    shards' cores. For Spark started beside the emulation; `restore_spark_priority` after
    `stop`. Each pass is a walk of this process's children (O(processes + JVM threads))."""
    import psutil

    lower = _lowerer()

    def run() -> None:
        while not stop.is_set():
            try:
                jvms = {p.pid for p in psutil.Process().children(recursive=True)
                        if p.name() == "java"}
            except psutil.Error:     # a process went away during the walk: next pass
                jvms = set()
            _each_thread(jvms, lower)
            stop.wait(every_s)

    thread = threading.Thread(target=run, name="spark-jvms-low", daemon=True)
    thread.start()
    return thread


def lower_spark_priority() -> int:
    """Let this process's Spark JVMs run only on CPU the shards leave: SCHED_IDLE, thread
    by thread, where `restore_spark_priority` can undo it, else nice 19 (below Ray's
    workers, which Ray starts at nice 15, the shards included; harmless alone). For Spark
    started beside the emulation (embedded Ray: every Ray process here is this run's).
    Python workers the executors fork later inherit it. Returns the processes changed."""
    if not hasattr(os, "sched_setscheduler"):
        return 0
    return _each_thread(_spark_jvm_pids(), _lowerer())


def restore_spark_priority() -> int:
    """Normal scheduling (SCHED_OTHER) again for the Spark JVMs' threads and their Python
    workers' (the analysis must not yield to every other process), where
    `lower_spark_priority` used SCHED_IDLE. Returns the processes changed."""
    if not hasattr(os, "sched_setscheduler") or not _can_leave_idle():
        return 0
    import psutil
    pids = _spark_jvm_pids()
    for pid in list(pids):
        try:
            pids |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
        except psutil.Error:
            continue

    def normal(tid: int) -> None:
        if os.sched_getscheduler(tid) == os.SCHED_IDLE:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
    return _each_thread(pids, normal)


def _ray_session() -> str | None:
    """Identity of the Ray cluster this process is connected to (None when not connected)."""
    import ray
    if not ray.is_initialized():
        return None
    return ray.get_runtime_context().gcs_address


def stop_spark(release: bool = False, timeout_s: float = 60.0) -> None:
    """Stop the RayDP Spark cluster started by start_spark (no-op when none).

    release: also make sure its Ray actors are gone before returning, so that a new
    session can start at once (after an executor was lost). raydp.stop_spark only asks
    the master actor to exit (its name stays taken until it has) and leaves a lost
    executor's actor restarting, holding its CPUs: the master is waited for (killed
    after `timeout_s` s) and every executor actor not dead yet is killed. With no
    session, release still clears what a start that failed part-way left (its master
    actor holds the name the next start needs)."""
    if _state["spark"] is None:
        if release and "spark_app" in _state:
            import raydp
            with contextlib.suppress(Exception):   # (RayDP's half-made context, if any)
                raydp.stop_spark()
            _release_spark_actors(_state["spark_app"], timeout_s)
        return
    import raydp
    archives = _state.pop("archives", None)
    try:
        if archives is not None and "executor" in archives.dumping:
            # the driver would log the executor's exit as an ERROR ("Lost executor")
            with contextlib.suppress(Exception):
                _state["spark"].sparkContext.setLogLevel("OFF")
            archives.keep("executor", _exit_executors(timeout_s))
        raydp.stop_spark()
        if archives is not None and "driver" in archives.dumping:
            archives.keep("driver", stop_driver_jvm(timeout_s))
    finally:
        _state["spark"] = None
        code_dir = _state.pop("code_dir", None)
        if code_dir is not None:
            shutil.rmtree(code_dir, ignore_errors=True)
        if release:
            _release_spark_actors(_state["spark_app"], timeout_s)


def class_archives_pending() -> bool:
    """Whether stopping the running Spark session writes JVM class archives (the first
    session on this machine: a one-off ~10 s wait that a console may announce)."""
    archives = _state.get("archives")
    return _state.get("spark") is not None and archives is not None and bool(archives.dumping)


def _session_archives(java: str, executors: int):
    """This session's JVM class archives (runtime/jvm_archive.py), None when the cache
    directory cannot be made (e.g. a read-only home): Spark then starts without."""
    try:
        archives = SessionArchives.for_java(java)
    except (OSError, ImportError) as exc:
        log.info("no JVM class archives: %s", exc)
        return None
    if executors > 1:
        archives.no_dump("executor")
    from pyspark import SparkContext
    if SparkContext._gateway is not None:   # the driver JVM of an earlier session, reused
        archives.no_dump("driver")
    return archives


def _exit_executors(timeout_s: float) -> bool:
    """SIGTERM this session's executor JVMs and wait for them: Java writes a class archive
    on an orderly exit, not on the SIGKILL RayDP stops them with. True if they all did."""
    import signal

    import psutil
    before = _state.get("executors_before", set())
    procs = []
    for aid, a in _executor_actors().items():      # unreadable: none, no archive this time
        if aid not in before and a.get("State") == "ALIVE" and a.get("Pid"):
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(int(a["Pid"]))
                p.send_signal(signal.SIGTERM)
                procs.append(p)
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for p in alive:     # a dump that long is stuck: its archive is dropped
        with contextlib.suppress(psutil.Error):
            p.kill()
    return bool(procs) and not alive


def stop_driver_jvm(timeout_s: float = 60.0) -> bool:
    """End the Spark driver JVM, the Py4J gateway PySpark keeps after a session stops and
    reuses for the next one in this process (with the Java options of its launch), by
    closing its input as at this process's exit: a JVM set to dump writes its class
    archive. PySpark launches a new one for the next session. True if it exited on its
    own, False if there was none or it had to be killed."""
    from pyspark import SparkContext
    gateway = SparkContext._gateway
    if gateway is None:
        return False
    SparkContext._gateway = SparkContext._jvm = None
    proc = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):
        gateway.shutdown()
    if proc is None:
        return False
    with contextlib.suppress(Exception):
        proc.stdin.close()
    try:
        proc.wait(timeout_s)
        return True
    except Exception:  # noqa: BLE001 - stuck in its dump: dropped
        proc.kill()
        return False


def _release_spark_actors(app_name: str, timeout_s: float) -> None:
    import time

    import ray
    worker = ray._private.worker.global_worker
    before = _state.get("executors_before", set())   # not this session's: left alone

    def ours() -> dict[str, str]:
        return {a: s for a, s in _executor_actor_states().items() if a not in before}

    for aid, state in ours().items():
        if state != "DEAD":
            with contextlib.suppress(Exception):   # gone meanwhile
                worker.core_worker.kill_actor(ray.ActorID.from_hex(aid), True)
    master = f"{app_name}_SPARK_MASTER"          # raydp.spark.ray_cluster's naming
    t0, killed = time.monotonic(), False
    while time.monotonic() - t0 < 2 * timeout_s:   # then init_spark says the name is taken
        try:
            handle = ray.get_actor(master)
        except ValueError:                      # the name is free
            # and the executors dead: the next session's watch takes none of them for its own
            if all(s == "DEAD" for s in ours().values()):
                return
            handle = None
        if handle is not None and not killed and time.monotonic() - t0 >= timeout_s:
            ray.kill(handle, no_restart=True)
            killed = True
        time.sleep(0.5)


def stop_ray() -> None:
    """Stop Spark if running, then disconnect from Ray (and stop it when embedded)."""
    stop_spark()
    import ray
    if ray.is_initialized():
        ray.shutdown()
    if _state.get("ray_started_here"):
        remove_java_library_copies(JAVA_DRIVER_LIBRARY_DIR, _state.get("ray_started_at", 0))
    _state["ray_started_here"] = False
    _undo_loopback_only()


JAVA_LIBRARY_COPY = ("file_lock", "libcore_worker_library_java.so")
# Ray's Java runtime (RayNativeRuntime) unpacks the library of a JVM that connects as a Ray
# driver into "/tmp/ray/" + currentTimeMillis, a fixed path whatever Ray's temp directory.
JAVA_DRIVER_LIBRARY_DIR = "/tmp/ray"
# A JVM unpacks the library holding the lock, lets the lock go, then loads the library: a
# copy younger than this may be between the two (lock free, library not loaded yet), and a
# JVM of another Ray on this machine would fail to load it were it deleted.
JAVA_LIBRARY_LOAD_GRACE_S = 2.0


def remove_java_library_copies(temp_dir: str | None, since: float) -> int:
    """Delete the copies of Ray's Java core-worker library that this Ray's JVMs unpacked
    under `temp_dir`; return how many. Every JVM that connects to Ray as a driver (the
    Spark driver and RayDP's app master) unpacks the 40 MB library into a directory of its
    own, /tmp/ray/<milliseconds>/, and nothing removes it: two per Spark session, 25 GB
    on this machine after a day of runs. Taken only: directories made since `since` (this
    Ray's start) holding nothing but the library and its lock file, whose library was
    written :data:`JAVA_LIBRARY_LOAD_GRACE_S` ago or more and whose lock no process holds
    (a JVM unpacking now holds it; a JVM that has loaded the library keeps its mapping
    when the file goes)."""
    import fcntl

    if not temp_dir or not os.path.isdir(temp_dir):
        return 0
    removed = 0
    loaded_by = time.time() - JAVA_LIBRARY_LOAD_GRACE_S
    for entry in os.scandir(temp_dir):
        try:
            if not (entry.name.isdigit() and entry.is_dir(follow_symlinks=False)
                    and entry.stat().st_mtime >= since - 1
                    and sorted(os.listdir(entry.path)) == sorted(JAVA_LIBRARY_COPY)
                    and os.stat(os.path.join(entry.path, JAVA_LIBRARY_COPY[1])).st_mtime
                    <= loaded_by):
                continue
            with open(os.path.join(entry.path, "file_lock"), "a") as lock:
                fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(entry.path)
            removed += 1
        except OSError:     # in use, gone meanwhile or not ours to delete: leave it
            continue
    return removed


@contextlib.contextmanager
def session(address: str | None = None, spark: bool = True,
            num_cpus: int | None = None, **spark_options) -> Iterator:
    """`with session() as spark:` Ray (and Spark unless spark=False, then None) for the
    duration of the block, torn down afterwards even on error. ``spark_options`` go to
    `start_spark` (e.g. ``cores=1`` to leave a CPU to Ray Data conversions)."""
    start_ray(address, num_cpus=num_cpus)
    try:
        yield start_spark(**spark_options) if spark else None
    finally:
        stop_ray()
