"""The engine: virtual clock, global cell grid, message batches, shards, the driver.

No protocol logic lives here: protocols plug in as stacks of handlers and declare their
message columns (`message_dtype`; docs/ARCHITECTURE.md).
"""
from . import jit_cache

jit_cache.install()   # before any kernel module: numba's cache keyed by every kernel source

from .batch import (  # noqa: E402
    ENGINE_DTYPE,
    Batch,
    message_dtype,
    new_messages,
    rank_within,
)
from .latency import RouterLatency  # noqa: E402


def __getattr__(name):  # the driver imports Ray; keep `import emulator.batch` light
    if name in ("Emulator", "EmulationError", "ShardLostError", "round_robin"):
        from . import driver
        return getattr(driver, name)
    raise AttributeError(name)


__all__ = ["ENGINE_DTYPE", "Batch", "EmulationError", "Emulator", "RouterLatency",
           "ShardLostError", "message_dtype", "new_messages", "rank_within", "round_robin"]
