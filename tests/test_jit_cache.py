"""emulator.jit_cache: the project's kernels are cached by what the kernel sources say, not
by where the project lies. A copy of the project at another path with new file times (what
`ray job submit --working-dir` unpacks) loads the kernels another copy compiled; a change
to the function's own file or to any other kernel file recompiles it.

The round trip runs in a small project of its own: the real jit_cache.py in an `emulator`
package with one cached kernel, each step in a fresh interpreter (numba's counters of
cache hits and misses tell whether it loaded or compiled).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emulator import jit_cache

KERNEL = """import numba


@numba.njit(cache=True)
def triple(x):
    return 3 * x
"""

OTHER_KERNEL_FILE = """import numba  # a kernel file that `triple` does not call


@numba.njit(cache=True)
def double(x):
    return 2 * x
"""

PROBE = """import json, sys
for project in sys.argv[1:]:       # each a fresh import of the package, as in a new process
    for name in [m for m in sys.modules if m == "emulator" or m.startswith("emulator.")]:
        del sys.modules[name]
    sys.path.insert(0, project)
    from emulator.kernel import triple
    sys.path.remove(project)
    assert triple(7) == 21
    print(json.dumps([sum(triple.stats.cache_hits.values()),
                      sum(triple.stats.cache_misses.values())]))
"""


def _project(root: Path) -> Path:
    package = root / "emulator"
    package.mkdir(parents=True)
    shutil.copy(Path(jit_cache.__file__), package / "jit_cache.py")
    shutil.copy(Path(jit_cache.__file__).with_name("kernel_sources.py"),
                package / "kernel_sources.py")
    (package / "__init__.py").write_text("from . import jit_cache\n\njit_cache.install()\n")
    (package / "kernel.py").write_text(KERNEL)
    (package / "other.py").write_text(OTHER_KERNEL_FILE)
    return root


def _copy(src: Path, dst: Path) -> Path:
    """The project's files elsewhere, without __pycache__ and with other file times."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    for path in dst.rglob("*.py"):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    return dst


def _env(cache: Path) -> dict:
    """This environment for a fresh interpreter caching the kernels under ``cache`` only."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR")}
    env[jit_cache.KERNEL_CACHE_ENV] = str(cache)
    return env


def _run(cache: Path, *projects: Path) -> list[str]:
    """For each project in turn: "loaded" or "compiled" (cache hits, misses of its kernel)."""
    res = subprocess.run([sys.executable, "-c", PROBE, *map(str, projects)], cwd=cache.parent,
                         env=_env(cache), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    counts = [json.loads(line) for line in res.stdout.strip().splitlines()]
    return [{(1, 0): "loaded", (0, 1): "compiled"}.get(tuple(c), str(c)) for c in counts]


def test_a_copy_elsewhere_loads_the_cache_and_a_changed_kernel_file_recompiles(tmp_path):
    cache = tmp_path / "cache"
    first = _project(tmp_path / "first")
    copy = _copy(first, tmp_path / "elsewhere" / "copy")       # another path, other times
    own = _copy(first, tmp_path / "own")
    (own / "emulator" / "kernel.py").write_text(KERNEL + "\n# edited\n")
    other = _copy(first, tmp_path / "other")
    (other / "emulator" / "other.py").write_text(OTHER_KERNEL_FILE.replace("2 * x", "x + x"))
    assert _run(cache, first, copy, own, other, copy) == [
        "compiled", "loaded", "compiled", "compiled", "loaded"]
    assert not list(tmp_path.rglob("__pycache__/*.nb[ic]"))      # not beside the sources
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 3  # one per source version


CONSTANT_KERNEL = """import numba

from .codes import FACTOR


@numba.njit(cache=True)
def scaled(x):
    return FACTOR * x
"""

CONSTANT_PROBE = """import json, sys
sys.path.insert(0, sys.argv[1])
from emulator.scaled import scaled
print(json.dumps([scaled(7), sum(scaled.stats.cache_hits.values())]))
"""


def test_a_changed_module_a_kernel_reads_a_constant_from_recompiles(tmp_path):
    """numba freezes a module global a kernel reads (here ``FACTOR``, as the handlers read
    type codes and field names from actors/*/types.py) into its code: the module defining
    it is a kernel source too, though it compiles nothing, so changing it recompiles the
    kernel instead of loading the old code and the old constant."""
    from emulator.kernel_sources import kernel_source_files

    cache = tmp_path / "cache"
    first = _project(tmp_path / "first")
    (first / "emulator" / "codes.py").write_text("FACTOR = 3\n")
    (first / "emulator" / "scaled.py").write_text(CONSTANT_KERNEL)
    (first / "emulator" / "engine.py").write_text("STEPS = 1\n")   # no kernel reads it
    keyed = {p.name for p in kernel_source_files(first)}
    assert {"codes.py", "scaled.py", "kernel.py", "other.py", "jit_cache.py"} <= keyed
    assert "engine.py" not in keyed
    changed = _copy(first, tmp_path / "changed")
    (changed / "emulator" / "codes.py").write_text("FACTOR = 4\n")

    def run(project):
        res = subprocess.run([sys.executable, "-c", CONSTANT_PROBE, str(project)],
                             cwd=tmp_path, env=_env(cache), capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        return json.loads(res.stdout)

    assert run(first) == [21, 0]        # compiled
    assert run(first) == [21, 1]        # loaded
    assert run(changed) == [28, 0]      # the new constant: compiled again


def _versions_left(root: Path, ages: list[float], monkeypatch) -> list[int]:
    """Which of the source versions last used `ages` seconds ago are left once another
    version is used."""
    for i, age in enumerate(ages):
        path = root / f"v{i:02d}"
        path.mkdir(parents=True)
        os.utime(path, (path.stat().st_atime, path.stat().st_mtime - age))
    monkeypatch.setenv(jit_cache.KERNEL_CACHE_ENV, str(root))
    monkeypatch.setattr(jit_cache, "_digest_dir", None)
    current = jit_cache.kernel_cache_dir()
    monkeypatch.setattr(jit_cache, "_digest_dir", None)   # the process's own stays as it was
    assert current.is_dir()
    return sorted(int(p.name[1:]) for p in root.iterdir() if p != current)


@pytest.mark.parametrize("recent", [3, jit_cache.KEEP_DIGESTS + 1])
def test_stale_source_versions_are_removed(tmp_path, monkeypatch, recent):
    """The KEEP_DIGESTS - 1 most recently used other versions stay, and any other used
    within STALE_AFTER_S (a run of it may be going on); the rest is removed."""
    old = 2 * jit_cache.STALE_AFTER_S
    ages = [60.0 + i for i in range(recent)] + [old + i for i in range(8)]
    left = _versions_left(tmp_path / "cache", ages, monkeypatch)
    assert left == list(range(max(recent, jit_cache.KEEP_DIGESTS - 1)))
