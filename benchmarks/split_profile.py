"""Where the shards' CPU goes, and what more shards add: two sets of shard profiles compared.

`bench_scale.py --profile-shards DIR` writes every shard's rounds, per phase, as
DIR/K<k>/shard<i>-<phase>.prof (cProfile with the thread's CPU clock). This sums the shards
of each set and splits their own time (tottime) into

- compiled kernels: numba dispatchers of this project (their dispatch included),
- our Python: every other function defined in this project's packages,
- numpy, builtins and the rest (Ray, the standard library),

then lists the functions whose time grew most from the first set to the second, with
their calls per processed cell when the cell counts are given (bench_scale prints them,
"cells, max / sum"):

    python benchmarks/split_profile.py DIR/K1 DIR/K2 [--phases join multicast]
        [--cells 2189 4086] [--top 25]

The profiler adds a cost to every Python call, so the glue's share is larger here than
without it: compare the two sets, not the profile with an unprofiled run's seconds.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import pstats
import sys
from pathlib import Path

from numba.core.registry import CPUDispatcher

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

PACKAGES = ("actors", "emulator", "topologies", "scenarios", "analysis")
KINDS = ("compiled kernels", "our Python", "numpy, builtins, other")


_MODULES: dict = {}     # dotted name -> the module imported (None: it did not import)


def own_module(filename: str) -> str | None:
    """The dotted module of a profiled file of this project (by its path from the last
    package directory in it, so that profiles of another checkout match), else None."""
    parts = Path(filename).with_suffix("").parts
    if ".venv" in parts or "site-packages" in parts:
        return None
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in PACKAGES:
            return ".".join(parts[i:])
    return None


def kind_of(filename: str, name: str) -> str:
    """Which of KINDS a profiled function is. O(1) after its module's first import."""
    mod = own_module(filename)
    if mod is None:
        return KINDS[2]
    if mod not in _MODULES:
        try:
            _MODULES[mod] = importlib.import_module(mod)
        except Exception:           # a module of another version: count it as Python
            _MODULES[mod] = None
    obj = getattr(_MODULES[mod], name, None)
    return KINDS[0] if isinstance(obj, CPUDispatcher) else KINDS[1]


def load(directory: Path, phase: str) -> dict:
    """{(file, line, function): [calls, own seconds]} summed over the shards' profiles of
    `phase` in `directory`; empty when there are none. O(functions x shards)."""
    total: dict = collections.defaultdict(lambda: [0, 0.0])
    for path in sorted(directory.glob(f"shard*-{phase}.prof")):
        for key, (_cc, calls, own, _cum, _callers) in pstats.Stats(str(path)).stats.items():
            total[key][0] += calls
            total[key][1] += own
    return total


def split(stats: dict) -> dict:
    """Own seconds per kind (KINDS). O(functions)."""
    out = dict.fromkeys(KINDS, 0.0)
    for (filename, _line, name), (_calls, own) in stats.items():
        out[kind_of(filename, name)] += own
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("first", type=Path, help="a bench_scale --profile-shards K directory")
    ap.add_argument("second", type=Path)
    ap.add_argument("--phases", nargs="+", default=["join", "multicast"])
    ap.add_argument("--cells", nargs=2, type=int, default=None,
                    help="cells processed by all shards of each set (for calls per cell)")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    for d in (a.first, a.second):
        if not any(d.glob("shard*-*.prof")):
            sys.exit(f"split_profile: no shard profiles (shard<i>-<phase>.prof) in {d}")
    for phase in a.phases:
        one, two = load(a.first, phase), load(a.second, phase)
        if not one or not two:
            print(f"\n{phase}: no profiles in both sets")
            continue
        s1, s2 = split(one), split(two)
        t1, t2 = sum(s1.values()), sum(s2.values())
        print(f"\n{phase}: shards' own CPU s, {a.first} -> {a.second}\n")
        print("| kind | first | second | added | share of what was added |")
        print("|---|---|---|---|---|")
        for k in KINDS:
            print(f"| {k} | {s1[k]:.2f} | {s2[k]:.2f} | {s2[k] - s1[k]:+.2f} | "
                  f"{100 * (s2[k] - s1[k]) / (t2 - t1) if t2 != t1 else 0:.0f} % |")
        print(f"| all | {t1:.2f} | {t2:.2f} | {t2 - t1:+.2f} | |")
        grew = sorted(set(one) | set(two),
                      key=lambda f: two.get(f, [0, 0.0])[1] - one.get(f, [0, 0.0])[1],
                      reverse=True)[:a.top]
        cells = a.cells or (1, 1)
        per = " per cell" if a.cells else ""
        print(f"\n| function | kind | calls{per}, first / second | own s, first / second |")
        print("|---|---|---|---|")
        for f in grew:
            (c1, o1), (c2, o2) = one.get(f, [0, 0.0]), two.get(f, [0, 0.0])
            name = f"{Path(f[0]).name}:{f[2]}" if f[0] != "~" else f[2]
            calls = (f"{c1 / cells[0]:.1f} / {c2 / cells[1]:.1f}" if a.cells
                     else f"{c1:,} / {c2:,}")
            print(f"| `{name}` | {kind_of(f[0], f[2])} | {calls} | {o1:.3f} / {o2:.3f} |")


if __name__ == "__main__":
    main()
