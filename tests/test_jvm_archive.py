"""runtime.jvm_archive: Spark's JVMs write class archives once and map them afterwards;
runtime.ray_spark removes the copies of Ray's Java library its JVMs unpack. (That a real
Spark session writes the archives and the next maps them is checked on the Ray and Spark
of tests/test_runtime.py's Arrow test, which start anyway.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from runtime import jvm_archive
from runtime import ray_spark as runtime
from runtime.jvm_archive import SessionArchives


def _jar(path, size):
    path.write_bytes(b"x" * size)
    return path


def test_archive_key_follows_java_and_jars(tmp_path):
    java = _jar(tmp_path / "java", 10)
    jars = tmp_path / "jars"
    jars.mkdir()
    a = _jar(jars / "a.jar", 5)
    (jars / "notes.txt").write_text("not a jar")
    key = jvm_archive.archive_key(str(java), [str(jars), str(tmp_path / "absent")])
    assert key == jvm_archive.archive_key(str(java), [str(jars)])
    (jars / "notes.txt").write_text("still not a jar, other size")
    assert key == jvm_archive.archive_key(str(java), [str(jars)])
    _jar(a, 6)                                            # a jar rebuilt
    rebuilt = jvm_archive.archive_key(str(java), [str(jars)])
    assert rebuilt != key
    _jar(jars / "b.jar", 1)                               # a jar added
    assert jvm_archive.archive_key(str(java), [str(jars)]) != rebuilt
    _jar(java, 11)                                        # another Java
    assert jvm_archive.archive_key(str(java), [str(jars)]) not in (key, rebuilt)


def test_first_session_dumps_then_later_ones_map(tmp_path):
    first = SessionArchives(tmp_path / "k")
    assert set(first.dumping) == set(jvm_archive.ROLES)
    opts = first.options()
    assert set(opts) == set(jvm_archive.SPARK_OPTION.values())
    parts = {role: str(first.dumping[role]) for role in jvm_archive.ROLES}
    assert len(set(parts.values())) == len(jvm_archive.ROLES)
    for role, key in jvm_archive.SPARK_OPTION.items():
        assert f"-XX:ArchiveClassesAtExit={parts[role]}" in opts[key]
        assert "-XX:+AllowArchivingWithJavaAgent" in opts[key]     # RayDP's agent
    # the driver exited in order; the executor was killed mid-dump
    _jar(first.dumping["driver"], jvm_archive.SMALLEST_ARCHIVE)
    _jar(first.dumping["executor"], jvm_archive.SMALLEST_ARCHIVE)
    assert first.keep("driver", exited=True)
    assert not first.keep("executor", exited=False)
    assert not first.keep("executor", exited=True)        # nothing left to keep
    assert sorted(p.name for p in (tmp_path / "k").iterdir()) == ["driver.jsa"]

    second = SessionArchives(tmp_path / "k")
    assert sorted(second.dumping) == ["executor"]
    opts = second.options()
    assert f"-XX:SharedArchiveFile={tmp_path / 'k' / 'driver.jsa'}" in \
        opts["spark.driver.extraJavaOptions"]
    assert "-XX:ArchiveClassesAtExit=" in opts["spark.executor.extraJavaOptions"]
    # a dump cut short (too small to be an archive) is not kept
    _jar(second.dumping["executor"], 100)
    assert not second.keep("executor", exited=True)
    assert not (tmp_path / "k" / "executor.jsa").exists()

    third = SessionArchives(tmp_path / "k")
    third.no_dump("executor")            # several executors on this machine: none dumps
    assert "spark.executor.extraJavaOptions" not in third.options()


def test_stale_parts_are_removed(tmp_path):
    d = tmp_path / "k"
    d.mkdir()
    old, fresh = d / "driver.aaa.part", d / "driver.bbb.part"
    old.write_bytes(b"x")
    fresh.write_bytes(b"x")
    hours_ago = time.time() - 2 * jvm_archive.STALE_PART_S
    os.utime(old, (hours_ago, hours_ago))
    SessionArchives(d)
    assert not old.exists() and fresh.exists()


def test_only_the_most_recently_used_keys_are_kept(tmp_path, monkeypatch):
    """A new install of the jars is a new key: the old keys' archives go, all but the
    most recently used, so the cache does not grow by an archive per install."""
    monkeypatch.setattr(jvm_archive, "KEEP_KEYS", 3)
    now = time.time()
    for hours, name in enumerate(["k0", "k1", "k2", "k3"], start=1):
        d = tmp_path / name
        d.mkdir()
        (d / "driver.jsa").write_bytes(b"x")
        os.utime(d, (now - 3600 * hours, now - 3600 * hours))
    (tmp_path / "a-file").write_text("not a key")

    def keys():
        return sorted(p.name for p in tmp_path.iterdir() if p.is_dir())

    SessionArchives(tmp_path / "k3")               # the oldest, used again
    assert keys() == ["k0", "k1", "k3"]
    assert (tmp_path / "a-file").exists()
    SessionArchives(tmp_path / "new")              # a fresh install
    assert keys() == ["k0", "k3", "new"]


def test_a_reused_driver_jvm_does_not_dump(tmp_path, monkeypatch):
    """PySpark reuses a driver JVM that outlived its session: one launched without the dump
    option cannot write an archive, so the session does not wait for one."""
    monkeypatch.setenv("SCRIBE_EMU_CACHE", str(tmp_path / "cache"))
    from pyspark import SparkContext
    monkeypatch.setattr(SparkContext, "_gateway", object())
    archives = runtime._session_archives(runtime.java_executable(), executors=1)
    assert sorted(archives.dumping) == ["executor"]
    monkeypatch.setattr(SparkContext, "_gateway", None)
    archives = runtime._session_archives(runtime.java_executable(), executors=2)
    assert sorted(archives.dumping) == ["driver"]


def test_merge_options_appends():
    conf = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1", "other": "1"}
    out = jvm_archive.merge_options(conf, {"spark.driver.extraJavaOptions": "-Xshare:auto",
                                           "spark.executor.extraJavaOptions": "-Xshare:auto"})
    assert out == {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -Xshare:auto",
                   "spark.executor.extraJavaOptions": "-Xshare:auto", "other": "1"}
    assert conf["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1"   # not changed


def test_java_library_copies_are_removed_when_unused_and_new(tmp_path):
    """Removed: the copies unpacked since this Ray's start, unlocked, loaded. Kept: an
    older one, a directory with more in it or another name, a locked one (a JVM unpacking)
    and one unpacked within the load grace (a JVM between unpacking and loading it)."""
    def copy(name, extra=(), written=None):
        d = tmp_path / name
        d.mkdir()
        for f in (*runtime.JAVA_LIBRARY_COPY, *extra):
            (d / f).write_bytes(b"x")
            if written is not None:
                os.utime(d / f, (written, written))
        if written is not None:
            os.utime(d, (written, written))
        return d

    now = time.time()
    since = now - 60                      # this Ray started a minute ago
    unpacked = since + 5                  # its JVMs unpacked their copies then
    mine = copy("1795600000001", written=unpacked)
    older = copy("1795600000002", written=since - 3600)
    other = copy("1795600000003", extra=("something_else",), written=unpacked)
    named = copy("session_latest_copy", written=unpacked)
    locked = copy("1795600000004", written=unpacked)
    loading = copy("1795600000005", written=now)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         f"f = open({str(locked / 'file_lock')!r}, 'a')\n"
         "fcntl.lockf(f, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert runtime.remove_java_library_copies(str(tmp_path), since) == 1
    finally:
        holder.kill()
        holder.wait()
    assert not mine.exists()
    assert older.exists() and other.exists() and named.exists() and locked.exists()
    assert loading.exists()
    assert runtime.remove_java_library_copies(str(tmp_path / "absent"), since) == 0
    assert runtime.remove_java_library_copies(None, since) == 0
