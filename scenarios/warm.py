"""Compile a scenario's numba kernels into their on-disk cache before its first real run.

The protocol handlers are numba kernels compiled on first use and cached on disk
(``cache=True``; where: emulator/jit_cache.py). A fresh install has no cache, so its
first run would compile them all inside the run, tens of seconds of the first `make run`
on two cores.
`make run` calls :func:`warm` first, once per machine (`make warm`): it runs a scaled-down
copy of the scenario -- the same phases, the same shard actors and the same code paths,
so the kernels compile with the signatures the full run looks up -- and throws the run
away. Nothing is analysed (Spark never starts) and nothing is kept but numba's cache.

Compiling is numba's own work, one kernel after another in one process: the stack's
compiled cell loop calls nearly every handler kernel, and compiling it compiles them all in
turn (about 140 s of one core from an empty cache). So the stack's kernels compile first,
on both cores: two scaled-down :data:`STACK_SCENARIO` runs at once, one shard each. One
composes the handlers in the loop, whose compile takes the engine's pass, then Pastry's
part, then Scribe's part and the pass's end, then the loop's body. The other, with the
stack ``one_by_one`` (actors/stack.py), compiles Scribe's part and the pass's end first,
on their own, for the types the loop passes them (``StackCellLoop.compile_ahead``), then
hands every run to its own handler, which compiles the handlers' entry points; the
loop's compile loads from the cache each kernel the other process has saved. The
scenarios asked for run after that, at two shards (cross-shard batches arrive read-only:
their own signatures), compiling only what is left.
"""

from __future__ import annotations

import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .config import ScenarioConfig, load_scenario

# The scaled-down run: enough nodes and groups that every phase has work on every shard
# (trees with forwarders, collapses, multicasts crossing shards) and that a shard's tree
# indexes outgrow their first size (their rehash is a kernel too), few enough that
# running them costs a fraction of compiling.
WARM_NODES = 600
WARM_GROUPS = 150
WARM_SHARDS = 2
# the scenario whose phases reach every handler of the stack: the join by the protocol,
# keep-alives and hop acknowledgements, failures, tree repair, multicasts
STACK_SCENARIO = "churn"
STACK_NODES = 150            # types, not sizes, pick what compiles: a small run, less to run
STACK_GROUPS = 15
STACK_CHURN_US = 3_000_000   # of churn: failures, repairs and multicasts all happen


def warm_config(name: str) -> ScenarioConfig:
    """Scenario `name` scaled down to the warm-up's size, one topology, every phase kept."""
    cfg = load_scenario(name, topologies=1)
    groups = min(WARM_GROUPS, cfg.groups)
    return load_scenario(name, nodes=min(WARM_NODES, cfg.nodes), groups=groups, topologies=1,
                         shards=WARM_SHARDS)


def stack_config() -> ScenarioConfig:
    """:data:`STACK_SCENARIO` at :data:`STACK_NODES` nodes, one shard, its churn shortened."""
    return load_scenario(STACK_SCENARIO, nodes=STACK_NODES, groups=STACK_GROUPS, topologies=1,
                         shards=1, sets=(f"churn.duration_us={STACK_CHURN_US}",
                                         f"churn.warmup_us={STACK_CHURN_US // 4}"))


def warm_stack(tmp: Path) -> None:
    """The stack's kernels compiled on two cores (the module docstring): two runs of
    :func:`stack_config` at once, in threads of this driver, each with its shard actor;
    O(one compilation of each kernel not cached yet, shared by two processes)."""
    from . import runner

    cfg = stack_config()
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(runner.emulate_only, cfg, tmp / f"stack-{i}", one_by_one)
                for i, one_by_one in enumerate((False, True))]
        for run in runs:
            run.result()


def warm(names: list[str], say=print, doing=lambda step: None) -> float:
    """Run each scenario of `names` scaled down (on the Ray already up, else an embedded
    one that the caller stops; no Spark) so that its kernels land in numba's cache; returns
    the seconds taken. ``say``: a finished step's line; ``doing``: the step under way, for a
    status line (from an empty cache the stack's step is minutes without output). O(size
    of the warm run) plus one compilation of each kernel not cached yet (none on a second
    call)."""
    from runtime.ray_spark import start_ray

    from . import runner

    t0 = time.perf_counter()
    configs = [warm_config(n) for n in names]      # bad names fail before Ray starts
    doing("starting Ray")
    start_ray(None)
    doing("compiling the protocol stack's kernels (about 2 minutes on 2 cores from an empty "
          "cache; seconds once they are cached)")
    with tempfile.TemporaryDirectory(prefix="scribe-emu-warm-") as tmp:
        warm_stack(Path(tmp))
    say(f"kernels of the stack compiled and cached ({time.perf_counter() - t0:.1f} s)")
    for cfg in configs:
        doing(f"compiling what is left of {cfg.name}'s kernels (a scaled-down run)")
        t1 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="scribe-emu-warm-") as tmp:
            runner.emulate_only(cfg, Path(tmp) / cfg.name)
        say(f"kernels of {cfg.name} compiled and cached ({time.perf_counter() - t1:.1f} s)")
    return time.perf_counter() - t0

