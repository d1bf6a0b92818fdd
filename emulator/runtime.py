"""The one module that starts and stops Ray and Spark (through RayDP).

Everything else (scenarios, analysis, the CLI) asks this module for a running Ray and a
SparkSession, so the settings that make them behave on a small machine (no dashboard,
localhost only, a bounded object store, few shuffle partitions, quiet logs, the right
Python for Spark workers) live in one place.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path


class RuntimeSetupError(RuntimeError):
    """Ray or Spark cannot be started because of the environment (message is one line)."""


_OBJECT_STORE_FRACTION = 0.30
_OBJECT_STORE_CAP = 8 * 1024**3      # more only helps when shards hold huge logs
_OBJECT_STORE_FLOOR = 256 * 1024**2

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

    The embedded Ray has no dashboard, listens on 127.0.0.1 only, logs at WARNING (actor
    errors and their tracebacks still reach the driver) and gets a bounded object store.
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
    common = dict(ignore_reinit_error=True, logging_level=logging.WARNING, log_to_driver=True)
    if address:
        try:
            ray.init(address=address, **common)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RuntimeSetupError(f"cannot connect to the Ray cluster at {address!r}: "
                                    f"{first}") from None
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
    ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
             object_store_memory=object_store_bytes(), **common)
    _state["ray_started_here"] = True


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


def start_spark(app_name: str = "scribe-emu", executors: int | None = None,
                cores: int | None = None, memory: str = "3GB",
                configs: dict[str, str] | None = None, driver_memory: str = "3g"):
    """A SparkSession whose executors are Ray actors (RayDP); starts Ray if needed.
    ``executors``/``cores`` None: `spark_shape()` of the cluster. ``memory``: per executor;
    ``driver_memory``: the Spark driver JVM's (`--set analysis.*` of a scenario).

    Returns the running session when one was already started here.
    """
    if (executors is not None and executors < 1) or (cores is not None and cores < 1):
        raise ValueError(f"Spark needs at least 1 executor with 1 core, got "
                         f"executors={executors}, cores={cores}")
    import ray
    if _state["spark"] is not None:
        if ray.is_initialized() and _state.get("spark_ray") == _ray_session():
            return _state["spark"]
        _state["spark"] = None      # the Ray it ran on was shut down: that session is gone
    java_executable()
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
    }
    if ray_is_local():
        # On an embedded Ray everything is on this host; elsewhere RayDP picks the node IP
        # so that executors on other machines can reach the driver.
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf["spark.driver.host"] = "127.0.0.1"
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # RayDP points the driver JVM at a log4j2 file that does not exist (log4j then prints
    # an error and Spark's INFO/WARN banner); give it one that logs errors only.
    conf["spark.log4j.config.file.name"] = str(_log4j2_file())
    conf.update(configs or {})
    # RayDP's fault-tolerant mode is refused under Ray Client (ray://...); it only matters
    # for recovering Spark data after an executor loss, which a re-run replaces.
    client = False
    with contextlib.suppress(Exception):
        import ray.util.client
        client = bool(ray.util.client.ray.is_connected())
    try:
        spark = raydp.init_spark(app_name, executors, cores, memory, configs=conf,
                                 fault_tolerant_mode=not client)
    except Exception as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RuntimeSetupError(f"cannot start Spark on Ray (RayDP): {msg}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    _state["spark"] = spark
    _state["spark_ray"] = _ray_session()
    return spark


def _ray_session() -> str | None:
    """Identity of the Ray cluster this process is connected to (None when not connected)."""
    import ray
    if not ray.is_initialized():
        return None
    return ray.get_runtime_context().gcs_address


def stop_spark() -> None:
    """Stop the RayDP Spark cluster started by start_spark (no-op when none)."""
    if _state["spark"] is None:
        return
    import raydp
    try:
        raydp.stop_spark()
    finally:
        _state["spark"] = None


def stop_ray() -> None:
    """Stop Spark if running, then disconnect from Ray (and stop it when embedded)."""
    stop_spark()
    import ray
    if ray.is_initialized():
        ray.shutdown()
    _state["ray_started_here"] = False


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
