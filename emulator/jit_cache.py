"""numba's on-disk cache, keyed by the sources of every kernel of the project.

numba checks a cached function against its own source file only. A kernel that calls
kernels of other files -- the compiled cell loop calls nearly all of them -- would load its
old machine code after one of those files changed (a `git pull`, an edit) and silently
compute the old rule. Here every cached function of the project is keyed by its own file
and by the contents of all the project's kernel files (``emulator/`` and ``actors/`` files
that use numba): a change to any of them recompiles, on its next use, each kernel used.
Functions outside the project keep numba's own locators.

:func:`install` puts the project's locators in front of numba's; it must run before the
first kernel module is imported (``emulator/__init__.py`` and the protocol packages'
``__init__`` call it). It relies on ``numba.core.caching.CacheImpl._locator_classes``,
numba's list of cache locators (numba >= 0.61; pyproject.toml pins the range).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from numba.core import caching

ROOT = Path(__file__).resolve().parents[1]
KERNEL_PACKAGES = ("emulator", "actors")
_digest: str | None = None


def kernel_sources_digest() -> str:
    """SHA-256 over the path and contents of every project file under
    :data:`KERNEL_PACKAGES` that mentions numba; computed once per process. O(their size)."""
    global _digest
    if _digest is None:
        h = hashlib.sha256()
        for package in KERNEL_PACKAGES:
            for path in sorted((ROOT / package).rglob("*.py")):
                text = path.read_bytes()
                if b"numba" in text:
                    h.update(str(path.relative_to(ROOT)).encode())
                    h.update(text)
        _digest = h.hexdigest()
    return _digest


def _in_project(py_file: str) -> bool:
    path = Path(py_file).resolve()
    return any(path.is_relative_to(ROOT / package) for package in KERNEL_PACKAGES)


class _ProjectStamp:
    """A locator's source stamp, with every kernel source of the project in it."""

    def get_source_stamp(self):
        return super().get_source_stamp(), kernel_sources_digest()

    @classmethod
    def from_function(cls, py_func, py_file):
        if not _in_project(py_file):
            return None
        return super().from_function(py_func, py_file)


class ProjectUserDirLocator(_ProjectStamp, caching.UserProvidedCacheLocator):
    """numba's NUMBA_CACHE_DIR locator, project-keyed."""


class ProjectInTreeLocator(_ProjectStamp, caching.InTreeCacheLocator):
    """numba's __pycache__ locator, project-keyed."""


def install() -> None:
    """Put the project's locators first (once)."""
    locators = caching.CacheImpl._locator_classes
    if ProjectInTreeLocator not in locators:
        locators[:0] = [ProjectUserDirLocator, ProjectInTreeLocator]
