"""One topology of a run emulated: the topology built and saved, its node ids and group
plan, the shard actors (the Emulator) started or restored from the last completed phase's
checkpoint, and the phases left run in order (scenarios/phases.py). A shard lost mid-phase
restarts the topology's shards from that checkpoint, run.retries times at most."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import numpy as np

from emulator.errors import first_line
from emulator.storage import cache_dir

from .config import ScenarioConfig, ScenarioError
from .groups import GroupPlan, plan_groups
from .phases import TopologyRun, complete_phase, load_rps
from .progress import log, warn
from .run_dir import RunState, RunStopped

CACHE_DIR = cache_dir()


def run_topology(cfg, run_dir, t, state: RunState, events, progress,
                 one_by_one: bool = False) -> None:
    """Every phase of topology t not yet completed. A shard whose process dies is replaced:
    the topology's shards are started again from the last completed phase's checkpoint and
    the phase replayed (run.retries times), which gives the same results as no failure.
    ``one_by_one``: the stacks hand every run to its own handler (actors/stack.py)."""
    from emulator import ShardLostError

    inputs = _prepare_topology(cfg, run_dir, t, state, progress)
    retries = int(cfg.run["retries"])
    for attempt in range(retries + 1):
        try:
            _emulate_topology(cfg, run_dir, t, state, events, progress, inputs, one_by_one)
            break
        except ShardLostError as e:
            done = state.completed(t)
            where = f"checkpoint {done[-1]!r}" if done else "the start"
            if attempt == retries:
                raise RunStopped(f"{e} (replayed {retries} time(s) already; run.retries = "
                                 f"{retries})", run_dir) from e
            warn(f"{e}; restarting topology {t}'s shards from {where} "
                 f"(retry {attempt + 1} of {retries})")
    state.d["topologies_done"].append(t)
    state.save()


@dataclasses.dataclass
class _TopologyInputs:
    """What every attempt at topology t shares: the topology, its group plan, latency model
    and the read-only tables the shards receive."""
    topo: object
    plan: GroupPlan
    latency: object
    shared: dict


def _prepare_topology(cfg, run_dir: Path, t: int, state: RunState, progress) -> _TopologyInputs:
    """Build topology t (saved under topology/), its node ids and group plan."""
    from actors.pastry.ids import node_ids
    from emulator import RouterLatency

    seed_t = cfg.seed + t
    progress.topo = t
    progress.status(f"topology {t + 1}/{cfg.topologies}: building {cfg.topology['source']} "
                    f"(seed {seed_t}, {cfg.nodes:,} hosts)")
    w0 = time.perf_counter()
    topo = _build_topology(cfg, t, seed_t)
    (run_dir / "topology").mkdir(exist_ok=True)
    topo.save(run_dir / "topology" / f"topo-{t}.npz")
    ids_hi, ids_lo = node_ids(cfg.nodes, seed_t)
    plan = plan_groups(cfg.name, cfg.groups_cfg["kind"], cfg.nodes, cfg.groups, cfg.seed, t,
                       cfg.groups_cfg["exponent"], cfg.groups_cfg["size"])
    state.add_time("topology_build", time.perf_counter() - w0)
    lat = RouterLatency.from_topology(topo)
    # the delays reach the shards in the latency model alone (one copy in the object store)
    shared = {"node_ids_hi": ids_hi, "node_ids_lo": ids_lo, "groups": plan.table}
    return _TopologyInputs(topo, plan, lat, shared)


def _build_topology(cfg: ScenarioConfig, t: int, seed_t: int):
    from topologies import TopologyError, make_topology
    try:
        tc = cfg.topology
        topo = make_topology(tc["source"], seed_t, cfg.nodes, cache_dir=CACHE_DIR,
                             lan_us=tc["lan_us"], placement=tc["placement"],
                             lan_hosts_per_router=tc["lan_hosts_per_router"],
                             mean_core_delay_us=tc["mean_core_delay_ms"] * 1000.0)
    except TopologyError as e:
        raise ScenarioError(f"topology {cfg.topology['source']!r}: {first_line(e)}") from None
    if not getattr(topo, "is_dense", True):
        raise ScenarioError(f"topology {cfg.topology['source']!r} has {topo.n_routers} routers, "
                            "more than the dense delay table the emulator's latency model "
                            "needs; use a smaller map")
    return topo


def _node_shard(cfg: ScenarioConfig, topo) -> np.ndarray | None:
    k = cfg.shards
    if k == 1 or cfg.topology["partition"] == "random":
        return None                     # the engine's round robin
    from topologies.partition import partition_routers
    part = partition_routers(topo, k)[topo.host_router].astype(np.int32)
    if len(np.unique(part)) < k:        # fewer occupied domains than shards
        log.warning("locality partition left shards empty; using round robin")
        return None
    return part


def _start_emulator(cfg, t: int, inputs: _TopologyInputs, events, progress,
                    one_by_one: bool = False):
    """The shard actors of topology t (the Emulator), logging in the run's layout."""
    from actors.messages import MESSAGE_LOG_FIELDS, MSG_DTYPE
    from actors.stack import stack_factory, type_names
    from emulator import Emulator

    seed_t = cfg.seed + t
    progress.status(f"topology {t + 1}/{cfg.topologies}: starting {cfg.shards} shard(s)")
    emu = Emulator(n_nodes=cfg.nodes, latency=inputs.latency,
                   stack_factory=stack_factory(cfg.pastry_params(seed_t), cfg.scribe_params(),
                                               one_by_one),
                   shards=cfg.shards, node_shard=_node_shard(cfg, inputs.topo), seed=seed_t,
                   shared=inputs.shared, run_dir=events.run_dir, topo_index=t,
                   type_names=type_names(), message_dtype=MSG_DTYPE,
                   message_log_fields=MESSAGE_LOG_FIELDS, **events.emulator_options())
    events.add_emulator(emu)
    log.info("topology %d: %d routers, %d hosts, delta %d us, lookahead %s us, %d shards",
             t, inputs.topo.n_routers, cfg.nodes, emu.delta_us, emu.lookahead_us, emu.shards)
    return emu


def _emulate_topology(cfg, run_dir, t, state: RunState, events, progress,
                      inputs: _TopologyInputs, one_by_one: bool = False) -> None:
    """Start the shards of topology t, restore its last checkpoint and run the phases left."""
    done = state.completed(t)
    events.clean_incomplete(t, done, _phase_of_file)
    w0 = time.perf_counter()
    emu = _start_emulator(cfg, t, inputs, events, progress, one_by_one)
    topo_run = TopologyRun(cfg, run_dir, t, cfg.seed + t, inputs.topo, inputs.plan, emu,
                            inputs.shared, events)
    state.add_time("emulator_setup", time.perf_counter() - w0)
    try:
        if done:
            emu.restore(done[-1])    # restore() takes the shards' next event times
            log.info("topology %d: restored checkpoint %r (virtual %d us)", t, done[-1], emu.now)
        else:
            _log_hosts(topo_run)
        if "create" in done:
            topo_run.rp = load_rps(topo_run)
        topo_run.phase_end = int(state.d.setdefault("phase_end", {}).get(str(t), 0))
        for phase in cfg.phase_order:
            if phase not in done:
                complete_phase(topo_run, phase, state, done, progress)
        _record_counters(state, t, emu.counters())
    finally:
        emu.shutdown()


def _log_hosts(topo_run: TopologyRun) -> None:
    """The static `host` rows of a topology: each node's router and Pastry id."""
    from actors.pastry.ids import to_hex
    shared = topo_run.shared
    topo_run.events.write("host", topo_run.t, "bootstrap", {
        "node": np.arange(topo_run.cfg.nodes, dtype=np.int32),
        "router": topo_run.topo.host_router.astype(np.int32),
        "id_hex": list(to_hex(shared["node_ids_hi"], shared["node_ids_lo"]))})


def _record_counters(state: RunState, t: int, c: dict) -> None:
    state.d["counters"][str(t)] = {
        "messages_sent": c["messages_sent"], "lost_total": c["lost_total"],
        "counts": c["counts"], "delta_us": c["delta_us"], "lookahead_us": c["lookahead_us"],
        "windows": c["windows"], "virtual_us": c["virtual_us"],
        # which types the compiled cell loop left to the Python loop, the whole run: the
        # messages of its passes, and the passes by the type of the run that stopped it
        "python_messages_by_type": c["python_by_type"],
        "passes_handed_back_by_type": c["handed_back_by_type"]}


def _phase_of_file(stem: str) -> str:
    """The phase an event-log file belongs to, from its name (<phase>-shard<i>/-driver...)."""
    return re.split(r"-(?:shard\d+|driver)", stem, maxsplit=1)[0]

