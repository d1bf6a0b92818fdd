"""Class-data-sharing archives for Spark's JVMs, so that a fresh Spark session starts faster.

A fresh analysis spends seconds in JVMs that load, parse and verify the same Spark, Hadoop
and Ray classes from jars: ~11,000 in the driver, as many again in the executor. Java 17
can write the classes a JVM has loaded into an archive when that JVM exits
(`-XX:ArchiveClassesAtExit`) and map the archive at a later start
(`-XX:SharedArchiveFile`), which saves seconds of Spark's start and of the first analysis
(benchmarks/bench_analysis.py --runs times both on a fresh process).

So the first Spark session on a machine (for a given Java and set of jars) runs its JVMs
with the dump option, and stopping it (runtime/ray_spark.py `stop_spark`) makes them exit in
a way that writes the archives (SIGTERM, or end of input for the driver's gateway) and waits
for them: a one-off ~10 s. Every later session maps them.

Only for an embedded Ray (`ray_spark.ray_is_local`): on a cluster the executors run on other
machines, whose caches this process cannot fill or see. Archives live under the project's
cache (`emulator.storage.cache_dir()`: $SCRIBE_EMU_CACHE, default ~/.cache/scribe-emu), in
jvm/<key>/ (~235 MB), the key a hash of the
java binary and the jar directories, so an upgrade of Java, Spark, Ray or RayDP makes new
ones. A JVM that cannot use an archive (another JVM build, changed jars) starts without it:
that is Java's own check (`-Xshare:auto`), results are never affected.

Every fresh install of the jars (a new virtualenv, a clean clone's CI) is a new key, so a
session keeps only the `KEEP_KEYS` most recently used keys' archives and removes the rest:
without that the cache grows by ~250 MB per install until the disk is full.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import time
import uuid
from pathlib import Path

from emulator.storage import cache_dir

log = logging.getLogger("scribe_emu.runtime")

# Not RayDP's app master: its JVM ends without writing one (RayDP's stop SIGTERMs it after
# closing its gateway, so no archive appears), and a JVM set to dump starts slower.
ROLES = ("driver", "executor")
SPARK_OPTION = {role: f"spark.{role}.extraJavaOptions" for role in ROLES}
# Java refuses to archive, or to map an archive, next to a -javaagent (RayDP's driver runs
# one) unless told the agent changes no class it archives (RayDP's logs only); the cds log
# tags are off because the dump warns about every class it leaves out, on the console.
COMMON_FLAGS = ("-XX:+UnlockDiagnosticVMOptions", "-XX:+AllowArchivingWithJavaAgent",
                "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off")
SMALLEST_ARCHIVE = 1 << 20    # a dump cut short leaves less; Java would refuse it anyway
STALE_PART_S = 3600.0         # a dump older than this whose JVM never finished: removed
KEEP_KEYS = 3                 # archive directories kept, the most recently used first


def cache_root() -> Path:
    return cache_dir() / "jvm"


def archive_key(java: str, jar_dirs) -> str:
    """Hash of what an archive depends on: the java binary and every jar (name, size,
    modification time). O(number of jars)."""
    h = hashlib.sha256()
    real = os.path.realpath(java)
    st = os.stat(real)
    h.update(f"{real}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    for d in jar_dirs:
        with contextlib.suppress(OSError):
            for e in sorted(os.scandir(d), key=lambda e: e.name):
                if e.name.endswith(".jar"):
                    s = e.stat()
                    h.update(f"{e.name}\0{s.st_size}\0{s.st_mtime_ns}\0".encode())
    return h.hexdigest()[:16]


def spark_jar_dirs() -> list[str]:
    """The jar directories of pyspark, Ray and RayDP (the JVMs' class path)."""
    import pyspark
    import ray
    import raydp
    return [os.path.join(os.path.dirname(m.__file__), "jars") for m in (pyspark, ray, raydp)]


class SessionArchives:
    """The archives of one Spark session: per role, map an existing archive or dump one.

    `options()` gives the Java options to add per Spark setting; `keep(role, exited)`
    (called while the session stops, once the dumping JVM has exited) keeps its archive.
    """

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        os.utime(self.directory)                  # its last use, which pruning goes by
        _remove_stale_parts(self.directory)
        remove_unused_keys(self.directory.parent, keep=self.directory)
        self.final = {role: self.directory / f"{role}.jsa" for role in ROLES}
        self.dumping: dict[str, Path] = {}
        for role in ROLES:
            if not self.final[role].is_file():
                self.dumping[role] = self.directory / f"{role}.{uuid.uuid4().hex[:12]}.part"

    @classmethod
    def for_java(cls, java: str) -> SessionArchives:
        return cls(cache_root() / archive_key(java, spark_jar_dirs()))

    def options(self) -> dict[str, str]:
        """{Spark setting: Java options} for the driver and the executors."""
        out = {}
        for role in ROLES:
            if role in self.dumping:
                flag = f"-XX:ArchiveClassesAtExit={self.dumping[role]}"
            elif self.final[role].is_file():
                flag = f"-XX:SharedArchiveFile={self.final[role]}"
            else:
                continue
            out[SPARK_OPTION[role]] = " ".join((*COMMON_FLAGS, flag))
        return out

    def no_dump(self, role: str) -> None:
        """Run `role` without dumping (several executors on this machine would write one
        file at once)."""
        self.dumping.pop(role, None)

    def keep(self, role: str, exited: bool) -> bool:
        """Make a dumped archive the one later sessions map once its JVM has `exited` in
        order; else (killed mid-dump) drop it."""
        part = self.dumping.get(role)
        if part is None:
            return False
        try:
            if not exited or part.stat().st_size < SMALLEST_ARCHIVE:
                part.unlink()
                return False
            os.replace(part, self.final[role])
            return True
        except OSError as exc:      # not written (disk full, JVM killed): the next one dumps
            log.info("JVM class archive %s not kept: %s", part.name, exc)
            with contextlib.suppress(OSError):
                part.unlink()
            return False


def _remove_stale_parts(directory: Path) -> None:
    now = time.time()
    for p in directory.glob("*.part"):
        with contextlib.suppress(OSError):
            if now - p.stat().st_mtime > STALE_PART_S:
                p.unlink()


def remove_unused_keys(root: Path, keep: Path, keys: int | None = None) -> list[str]:
    """Remove the archive directories under `root` beyond the `keys` (default `KEEP_KEYS`)
    most recently used (by modification time), never `keep`; return the names removed. A
    JVM mapping a removed archive keeps its mapping (the file lives on until unmapped); one
    dumping into a removed directory fails to write and the next session dumps again
    (`keep`). O(directories)."""
    entries = []
    with contextlib.suppress(OSError):
        for e in os.scandir(root):
            if e.is_dir(follow_symlinks=False) and e.path != str(keep):
                with contextlib.suppress(OSError):
                    entries.append((e.stat().st_mtime, e.name))
    entries.sort(reverse=True)
    keys = KEEP_KEYS if keys is None else keys
    removed = []
    for _, name in entries[max(keys - 1, 0):]:
        shutil.rmtree(root / name, ignore_errors=True)
        removed.append(name)
    return removed


def merge_options(conf: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """`conf` with `extra`'s Java options appended to any it already has."""
    out = dict(conf)
    for key, value in extra.items():
        out[key] = f"{out[key]} {value}" if out.get(key) else value
    return out
