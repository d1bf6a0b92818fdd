"""Name the compiled kernels in a `perf` profile: the Pastry bootstrap of bench_pastry.py in
this process, then a perf map of every numba kernel it loaded from the cache.

perf sees numba's machine code as anonymous memory ("[JIT]"). numba loads a cached kernel
as an object file, whose symbol table names every function in it (the kernel and the
callees linked into it); this script keeps each object as numba loads it, and at exit
writes ``/tmp/perf-<pid>.map`` (perf's format for JIT code: start, size, name) from those
symbol tables and the addresses numba's engine gives the exported ones. Kernels compiled
in this process (not loaded from the cache) are not named: run once to fill the cache.

    perf record -F 2000 -o perf.data python benchmarks/kernel_perf.py [--nodes 10000]
    perf report -i perf.data --no-children --sort sym

``NRT_incref`` / ``NRT_decref`` in the report are numba's reference counts (an atomic
add per call): a compiled function that calls another one takes a reference to each array
it was passed, and to each array it reads out of a tuple, and drops it at its end.
"""

from __future__ import annotations

import argparse
import atexit
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from numba.core import codegen

sys.path.insert(0, str(Path(__file__).resolve().parent))
_LOADED: list = []                    # (library, object code) of every cached kernel loaded
_unserialize = codegen.JITCodeLibrary._unserialize.__func__


def _keep_object(cls, cg, state):
    lib = _unserialize(cls, cg, state)
    if state[1] == "object":
        _LOADED.append((lib, state[2][0]))
    return lib


codegen.JITCodeLibrary._unserialize = classmethod(_keep_object)


def _functions(obj: bytes) -> dict[str, tuple[int, int]]:
    """{name: (offset in its section, size)} of the functions an object file defines."""
    with tempfile.NamedTemporaryFile(suffix=".o") as f:
        f.write(obj)
        f.flush()
        out = subprocess.run(["nm", "-S", "--defined-only", f.name], capture_output=True,
                             text=True, check=True).stdout
    funcs = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            funcs[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
    return funcs


def write_perf_map(path: str | None = None) -> int:
    """Write perf's map of the kernels loaded so far; returns the functions named. numba
    puts a kernel's code in one section, so the address of an exported function that no
    other object defines gives the section's start."""
    rows = set()
    objects = [(lib, _functions(obj)) for lib, obj in _LOADED]
    # numba links a kernel's callees into its object, so a callee's name is defined in
    # several objects, and the engine's address for it is one of them: only a name that
    # one object alone defines locates that object
    seen: dict[str, int] = {}
    for _, funcs in objects:
        for name in funcs:
            seen[name] = seen.get(name, 0) + 1
    for lib, funcs in objects:
        engine = lib._codegen._engine
        base = None
        for name, (offset, _) in funcs.items():
            if seen[name] == 1 and engine.is_symbol_defined(name):
                address = engine.get_function_address(name)
                if address:
                    base = address - offset
                    break
        if base is not None:
            rows.update((base + off, size, name) for name, (off, size) in funcs.items())
    with open(path or f"/tmp/perf-{os.getpid()}.map", "w") as f:
        for address, size, name in sorted(rows):
            f.write(f"{address:x} {size:x} {name}\n")
    return len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--rate", type=float, default=10.0, help="joins per second")
    a = ap.parse_args()
    atexit.register(lambda: print(f"perf map: {write_perf_map()} functions", file=sys.stderr))
    from bench_pastry import bench_protocol
    bench_protocol(a.nodes, 500, a.rate, quality=False)


if __name__ == "__main__":
    main()
