"""Compile a scenario's numba kernels into their on-disk cache before its first real run.

The protocol handlers are numba kernels compiled on first use and cached on disk
(``cache=True``; where: emulator/jit_cache.py). A fresh install has no cache, so its
first run would compile them all inside the run, tens of seconds of the first `make run`
on two cores.
`make run` calls :func:`warm` first, once per machine (`make warm`): it runs a scaled-down
copy of the scenario -- the same phases, the same shard actors and the same code paths,
so the kernels compile with the signatures the full run looks up -- and throws the run
away. Nothing is analysed (Spark never starts) and nothing is kept but numba's cache.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from .config import ScenarioConfig, load_scenario

# The scaled-down run: enough nodes and groups that every phase has work on every shard
# (trees with forwarders, collapses, multicasts crossing shards), few enough that running
# them costs a fraction of compiling.
WARM_NODES = 600
WARM_GROUPS = 40
WARM_SHARDS = 2


def warm_config(name: str) -> ScenarioConfig:
    """Scenario `name` scaled down to the warm-up's size, one topology, every phase kept."""
    cfg = load_scenario(name, topologies=1)
    groups = min(WARM_GROUPS, cfg.groups)
    return load_scenario(name, nodes=min(WARM_NODES, cfg.nodes), groups=groups, topologies=1,
                         shards=WARM_SHARDS)


def warm(names: list[str], say=print) -> float:
    """Run each scenario of `names` scaled down (on the Ray already up, else an embedded
    one that the caller stops; no Spark) so that its kernels land in numba's cache; returns
    the seconds taken. O(size of the warm run) plus one compilation of each kernel not
    cached yet (none on a second call)."""
    from runtime.ray_spark import start_ray

    from . import runner

    t0 = time.perf_counter()
    configs = [warm_config(n) for n in names]      # bad names fail before Ray starts
    start_ray(None)
    for cfg in configs:
        t1 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="scribe-emu-warm-") as tmp:
            runner.emulate_only(cfg, Path(tmp) / cfg.name)
        say(f"kernels of {cfg.name} compiled and cached ({time.perf_counter() - t1:.1f} s)")
    return time.perf_counter() - t0

