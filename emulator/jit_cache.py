"""numba's on-disk cache, keyed by the sources of every kernel of the project.

numba checks a cached function against its own source file only. A kernel that calls
kernels of other files -- the compiled cell loop calls nearly all of them -- would load its
old machine code after one of those files changed (a `git pull`, an edit) and silently
compute the old rule; so would a kernel reading a module global (a type code, a field
name: numba freezes it into the code) after the plain module defining it changed. Here
every cached function of the project is keyed by its own file and by the contents of the
kernel sources (emulator/kernel_sources.py: the ``emulator/`` and ``actors/`` files that
import numba and every project module they import): a change to any of them recompiles,
on its next use, each kernel used.

The project's kernels are cached under this user's scribe-emu cache, not next to their
sources: ``<cache>/numba/<digest of the kernel sources>/<the file's directory relative to
the project root>/`` (``<cache>``: $SCRIBE_EMU_KERNEL_CACHE, otherwise
$NUMBA_CACHE_DIR/scribe-emu when numba's cache is redirected, otherwise
``emulator.storage.cache_dir()/numba``). Nothing in the key depends on where the project
lies or when its files were written, so every copy with the same kernel sources loads what
one of them compiled: a second checkout, and the copy of the project that Ray unpacks for
``ray job submit --working-dir`` (without ``__pycache__``, which .gitignore leaves out, and
with new file times), which would otherwise compile every kernel again. A digest's
directory unused for a day is removed once :data:`KEEP_DIGESTS` newer ones exist.
Functions outside the project keep numba's own locators.

:func:`install` puts the project's locators in front of numba's; it must run before the
first kernel module is imported (``emulator/__init__.py`` and the protocol packages'
``__init__`` call it). It relies on ``numba.core.caching.CacheImpl._locator_classes``,
numba's list of cache locators, and on its ``_CacheLocator`` interface (numba >= 0.61;
pyproject.toml pins the range).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import time
from pathlib import Path

from numba.core import caching, config

from . import kernel_sources

ROOT = Path(__file__).resolve().parents[1]
KERNEL_PACKAGES = kernel_sources.PACKAGES
KERNEL_CACHE_ENV = "SCRIBE_EMU_KERNEL_CACHE"
KEEP_DIGESTS = 8                 # digest directories kept whatever their age
STALE_AFTER_S = 24 * 3600        # an older digest directory unused this long is removed
_digest: str | None = None
_digest_dir: Path | None = None


def kernel_sources_digest() -> str:
    """SHA-256 over the path (relative to the project root) and contents of every kernel
    source (``kernel_sources.kernel_source_files``); computed once per process. O(the
    packages' size)."""
    global _digest
    if _digest is None:
        h = hashlib.sha256()
        for path in kernel_sources.kernel_source_files(ROOT):
            h.update(str(path.relative_to(ROOT)).encode())
            h.update(path.read_bytes())
        _digest = h.hexdigest()
    return _digest


def kernel_cache_root() -> Path:
    """Where the project's kernels of every source version are cached (module docstring)."""
    if os.environ.get(KERNEL_CACHE_ENV):
        return Path(os.environ[KERNEL_CACHE_ENV])
    if config.CACHE_DIR:
        return Path(config.CACHE_DIR) / "scribe-emu"
    from emulator.storage import cache_dir  # (it imports pyarrow: only once a kernel caches)
    return cache_dir() / "numba"


def kernel_cache_dir() -> Path:
    """This source version's cache directory; the first call in a process marks it used
    and removes stale ones of other versions."""
    global _digest_dir
    if _digest_dir is None:
        root = kernel_cache_root()
        path = root / kernel_sources_digest()[:20]
        path.mkdir(parents=True, exist_ok=True)
        os.utime(path)
        _remove_stale(root, keep=path)
        _digest_dir = path
    return _digest_dir


def _remove_stale(root: Path, keep: Path) -> None:
    """Remove the directories of other source versions beyond the KEEP_DIGESTS most
    recently used, when unused for STALE_AFTER_S (a run of them may still be going)."""
    try:
        others = sorted((p for p in root.iterdir() if p.is_dir() and p != keep),
                        key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    now = time.time()
    for path in others[KEEP_DIGESTS - 1:]:
        try:
            if now - path.stat().st_mtime > STALE_AFTER_S:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue


def kernel_cache_path(py_file: str | Path) -> Path:
    """The directory the kernels of project file `py_file` are cached in."""
    rel = Path(py_file).resolve().relative_to(ROOT)
    return kernel_cache_dir() / rel.parent


@functools.cache
def _file_digest(path: str, st_mtime: float, st_size: int) -> str:
    # the file's time and size in the key: a file changed while the process runs is read again
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _in_project(py_file: str) -> bool:
    path = Path(py_file).resolve()
    return any(path.is_relative_to(ROOT / package) for package in KERNEL_PACKAGES)


class ProjectCacheLocator(caching._CacheLocator):
    """The project's kernels in the shared cache (module docstring). The stamp is the
    file's own digest and that of every kernel source: numba recompiles a function when
    either changed (its directory already tells the second; the stamp says it again)."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = str(kernel_cache_path(py_file))

    def get_cache_path(self):
        return self._cache_path

    def get_source_stamp(self):
        st = os.stat(self._py_file)
        return _file_digest(self._py_file, st.st_mtime, st.st_size), kernel_sources_digest()

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        if not os.path.exists(py_file) or not _in_project(py_file):
            return None
        try:
            self = cls(py_func, py_file)
            self.ensure_cache_path()
        except OSError:          # no writable cache: the __pycache__ locator below
            return None
        return self


class _ProjectStamp:
    """A locator's source stamp, with every kernel source of the project in it."""

    def get_source_stamp(self):
        return super().get_source_stamp(), kernel_sources_digest()

    @classmethod
    def from_function(cls, py_func, py_file):
        if not _in_project(py_file):
            return None
        return super().from_function(py_func, py_file)


class ProjectInTreeLocator(_ProjectStamp, caching.InTreeCacheLocator):
    """numba's __pycache__ locator, project-keyed: where the shared cache cannot be
    written."""


def install() -> None:
    """Put the project's locators first (once)."""
    locators = caching.CacheImpl._locator_classes
    if ProjectCacheLocator not in locators:
        locators[:0] = [ProjectCacheLocator, ProjectInTreeLocator]
