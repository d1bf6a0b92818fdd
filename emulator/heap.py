"""Give the C heap's free pages back to the operating system.

A shard's handlers and kernels allocate and free temporaries all phase long (the
kernels' arrays, numpy's, the pass records). glibc's malloc keeps what is freed for reuse instead
of returning it, and only the top of a heap can shrink: on the 1,000,000-node run a shard
held 0.7 GB of freed heap at the end of its join phase (3.6 GB resident, 2.9 GB after
:func:`trim`). Writing the phase's logs then takes fresh memory on top (Arrow and Parquet
allocate from their own pool, not from glibc's free lists), which made the flush the
emulation's peak. So a shard trims its heap where it knows the phase's work is over.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none (macOS, musl)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def trim() -> None:
    """Return every free page of the C heap (all threads' arenas) to the OS: glibc's
    ``malloc_trim(0)``, nothing elsewhere. O(the heap's size); milliseconds for GBs."""
    f = _malloc_trim()
    if f is not None:
        f(0)
