"""emulator/heap.py: freed C heap memory goes back to the operating system."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys
from pathlib import Path

import pytest

from emulator import heap

_FRAGMENTED = """
import sys
import numpy as np
from emulator import heap
if sys.argv[1] == "mapped":
    heap.map_large_blocks()

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

big = np.ones(4 << 17)       # 4 MB, freed: glibc's own threshold rises above 2 MB
del big
tables, kept = [], []
for _ in range(60):          # 2 MB tables between small arrays that stay
    tables.append(np.ones(2 << 17))
    kept.append(np.ones(20_000))   # 160 KB: from the heap either way
before = rss()
del tables
print(before - rss())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or heap._glibc("mallopt") is None
                    or ctypes.util.find_library("c") is None, reason="glibc only")
def test_mapped_large_blocks_go_back_when_freed_between_live_ones():
    """Tables of 2 MB freed between small arrays that stay: with glibc's default they stay
    resident (holes in the heap), with map_large_blocks each went back as it was freed."""
    def freed(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _FRAGMENTED, mode], capture_output=True,
                             text=True, check=True)
        return int(out.stdout.strip())

    assert freed("mapped") > 100 << 20          # ~120 MB back
    assert freed("default") < 20 << 20


_FROZEN = """
import gc
import weakref
from emulator import heap

class Node:
    pass

state = [[i] for i in range(100_000)]        # a shard's long-lived objects
dropped = Node()
gone = weakref.ref(dropped)
before = len(gc.get_objects())
heap.freeze_survivors()
walked = len(gc.get_objects())               # what a full collection walks now
made_after = [[i] for i in range(10)]
del dropped                                   # frozen, but reference counting frees it
print(before, walked, gc.get_freeze_count(), len(gc.get_objects()) - walked, gone() is None)
"""


def test_frozen_survivors_leave_the_collectors_walks_and_still_free():
    """After freeze_survivors the collector walks only what was made since (the shard's
    phases no longer pay a walk of its set-up's objects), and an object frozen and then
    dropped is still freed by its reference count."""
    out = subprocess.run([sys.executable, "-c", _FROZEN], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1])
    before, walked, frozen, new, freed = out.stdout.split()
    assert int(before) > 100_000 and int(frozen) > 100_000
    assert int(walked) < 1_000
    assert int(new) >= 10
    assert freed == "True"
