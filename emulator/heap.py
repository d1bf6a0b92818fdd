"""Give the C heap's free pages back to the operating system.

A shard's handlers and kernels allocate and free temporaries all phase long (the
kernels' arrays, numpy's, the pass records). glibc's malloc keeps what is freed for reuse instead
of returning it, and only the top of a heap can shrink: on the 1,000,000-node run a shard
held 0.7 GB of freed heap at the end of its join phase (3.6 GB resident, 2.9 GB after
:func:`trim`). Writing the phase's logs then takes fresh memory on top (Arrow and Parquet
allocate from their own pool, not from glibc's free lists), which made the flush the
emulation's peak. So a shard trims its heap where it knows the phase's work is over.

Spark's Python processes (the driver collecting tables, the workers running grouped maps)
make and drop tables of MBs all session long: :func:`map_large_blocks` has each go back to
the OS when freed.

Python's own heap: a shard process holds some 200,000 objects that live as long as it
does (Ray's, the compiler's, the kernels loaded from the cache, the stack's), and the
cycle collector's oldest generation walks them all, a few tenths of a second each time on
the 2-core VMs, whenever enough new objects survived (a phase that loads kernels on first
use makes that happen mid-phase). :func:`freeze_survivors` takes what exists at a phase
boundary out of the collector's walks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc


@functools.cache
def _glibc(function: str):
    """glibc's ``function``, or None where the C library has none (macOS, musl)."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), function) if name else None
    except (OSError, AttributeError):
        return None


def trim() -> None:
    """Return every free page of the C heap (all threads' arenas) to the OS: glibc's
    ``malloc_trim(0)``, nothing elsewhere. O(the heap's size); milliseconds for GBs."""
    f = _glibc("malloc_trim")
    if f is not None:
        f(0)


def freeze_survivors() -> None:
    """Move every object the cycle collector tracks now into its permanent generation
    (``gc.freeze``): later collections walk only what is made after. Reference counting
    still frees a frozen object; only a cycle among frozen objects that becomes garbage
    stays, so this is for points where the process's objects are its long-lived state (a
    shard set up, a phase's logs written), not its temporaries. O(1)."""
    gc.freeze()


# glibc's mallopt parameter for the size above which an allocation gets its own mapping
_M_MMAP_THRESHOLD = -3
LARGE_BLOCK = 256 * 1024
# the same setting for a process about to start (glibc reads it at its first malloc)
LARGE_BLOCK_ENV = {"MALLOC_MMAP_THRESHOLD_": str(LARGE_BLOCK)}


def map_large_blocks() -> None:
    """From now on, give every allocation above :data:`LARGE_BLOCK` a mapping of its own,
    returned to the OS when freed. glibc's own threshold rises after each large free up to
    32 MB, so a process that makes and drops tables of a few MB keeps them in its heap,
    where freed pages stay resident. Not for the shards: a mapping per large temporary
    costs their hot loop page faults. Nothing where the C library is not glibc."""
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK)
