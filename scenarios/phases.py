"""The phases of one topology's emulation: what each phase injects, how long it runs, and
how a completed phase is logged, checkpointed and recorded.

  bootstrap            oracle: nothing to run; protocol: the join protocol on the clock,
                       then the table quality against the oracle (run.log, summary.json)
  create               CREATE of every group by its creator -> `group` rows (the RPs)
  join                 JOIN of every member (`membership` rows written here)
  multicast[_*]        one message per group from its RP (variants: plain, collapsed,
                       bottleneck -- each in its own phase so link stress separates them)
  collapse             collapse requests at every node
  churn                a stream of multicasts while nodes fail and recover (`publish` and
                       `node_event` rows written here; the schedule: scenarios/churn.py)

At the end of every phase: the stacks' ``dump`` (tree snapshots), ``emu.flush`` (Parquet, or
refs), ``emu.checkpoint``; then state.json records the phase, so ``--resume`` restores the
last checkpoint and continues with identical results.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .churn import churn_schedule
from .config import ScenarioConfig, ScenarioError
from .event_logs import RunEvents
from .groups import GroupPlan, join_times
from .progress import log
from .run_dir import RunState

_ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class TopologyRun:
    """One topology's emulation in progress: its inputs, its Emulator, its groups' RPs
    once created, and where the last phase ended."""
    cfg: ScenarioConfig
    run_dir: Path
    t: int
    seed_t: int
    topo: object
    plan: GroupPlan
    emu: object
    shared: dict
    events: RunEvents
    rp: np.ndarray | None = None
    phase_end: int = 0        # shard-independent end of the last phase (see _phase_end)


def _phase_end(topo_run: TopologyRun, until: int | None) -> int:
    """When the phase just run ended, the same for any number of shards: the grid point it
    ran to when bounded, else just after the last event anywhere. (The driver's `now` is
    the end of its last window, which depends on the lookahead and so on the partition.)"""
    if until is not None:
        return int(topo_run.emu.now)
    return max(int(x) for x in topo_run.emu.call("clock")) + int(topo_run.emu.delta_us)


def _start(topo_run: TopologyRun) -> int:
    """Virtual time of the next phase's first stimulus: a gap after the last phase's end."""
    t0 = topo_run.phase_end + int(topo_run.cfg.phases["gap_us"])
    if t0 < topo_run.emu.now:
        raise ScenarioError(f"phases.gap_us = {topo_run.cfg.phases['gap_us']} is shorter than "
                            "the emulator's last window "
                            f"({topo_run.emu.now - topo_run.phase_end} us); raise it")
    return t0


def _run(topo_run: TopologyRun, phase: str, last_stimulus: int, progress) -> dict:
    """Run a phase whose last stimulus is at ``last_stimulus``: to its end when its timers
    stop by themselves, else (keep-alives or heartbeats) for phases.settle_us after it."""
    until = last_stimulus + topo_run.cfg.phases["settle_us"] if topo_run.cfg.periodic else None
    progress.start_phase()
    stats = topo_run.emu.run(phase, until=until, progress=progress)
    stats["until"] = until
    return stats


def _phase_bootstrap(topo_run: TopologyRun, progress) -> dict:
    cfg = topo_run.cfg
    if cfg.pastry["bootstrap"] == "oracle":
        return {"windows": 0, "messages": 0, "virtual_us": int(topo_run.emu.now), "wall_s": 0.0,
                "until": 0}
    from actors.pastry.join import join_schedule
    p = cfg.pastry_params(topo_run.seed_t)
    arrivals = join_schedule(cfg.nodes, p["join_rate_per_s"], p.get("join_start_us", 0),
                             p["seed"])
    last = int(arrivals[-1]) + int(topo_run.emu.delta_us) + 1
    with _OracleBeside(topo_run, p) as oracle:
        # a node keeps refreshing its leaf set for join_settle_us after the last arrival
        stats = _run_joins(topo_run, last + p["join_settle_us"], progress)
        stats["quality"] = _overlay_quality(topo_run, oracle)
    log.info("topology %d: protocol bootstrap table quality %s", topo_run.t, stats["quality"])
    return stats


class _OracleBeside:
    """The oracle's exact PNS state, which the table-quality check compares the joined
    overlay with, computed by scenarios/oracle_job.py in a process of its own while the
    shards run the join: it depends on the topology, the node ids and Pastry's b, l and m
    alone, and a protocol bootstrap leaves a core free (one shard per machine up to
    100,000 nodes on two cores). The process has a session of its own (a terminal's
    Ctrl-C reaches the driver only) and is stopped when the context ends. Without a
    saved topology (a run without a directory) there is no process: the check computes
    the oracle itself."""

    def __init__(self, topo_run: TopologyRun, pastry_params: dict):
        self.proc = None
        if topo_run.run_dir is None:
            return
        folder = topo_run.run_dir / "topology"
        topology = folder / f"topo-{topo_run.t}.npz"
        self.out = folder / f"oracle-{topo_run.t}.npz"     # (oracle_job.py's file)
        if not topology.is_file():
            return
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scenarios.oracle_job", str(topology),
             str(topo_run.cfg.nodes), str(topo_run.seed_t), *(str(pastry_params[k])
                                                             for k in ("b", "l", "m")),
             str(self.out)],
            cwd=_ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)

    def result(self):
        """The state (a PastryState), or None if there is no process or it failed (its
        error logged). Waits for the process."""
        from actors.pastry.state import PastryState
        if self.proc is None:
            return None
        _, err = self.proc.communicate()
        if self.proc.returncode != 0 or not self.out.is_file():
            lines = err.strip().splitlines()
            log.warning("the oracle's process failed (exit %s): %s", self.proc.returncode,
                        lines[-1] if lines else "no message")
            return None
        with np.load(self.out) as z:
            return PastryState(rt=z["rt"], leaf=z["leaf"], nbr=z["nbr"], b=int(z["b"]))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        for path in (self.out, self.out.with_name(self.out.name + ".tmp.npz")):
            path.unlink(missing_ok=True)     # (the job's file, or the one it was writing)


# the bootstrap waits at most this many settle_us periods past its planned end for the
# last joins (a join held by contacts that are still joining ends within ~10 s of them)
MAX_JOIN_WAITS = 20


def _joined(topo_run: TopologyRun) -> int:
    """Nodes Pastry counts as joined, over all shards."""
    return sum(int(x) for x in topo_run.emu.call("joined"))


def _run_joins(topo_run: TopologyRun, last_stimulus: int, progress) -> dict:
    """The protocol bootstrap's run: as :func:`_run`, and with periodic timers on, further
    until every node has joined, then settle_us more. A fixed end is not enough: a contact
    still joining holds a joiner's request (up to 10 s, ``actors.pastry.join``), so in a
    flash crowd, where contacts wait on contacts, joins end long after the last arrival
    (500 arrivals in 1 s on ts5050: three quarters of the nodes join after last arrival +
    join_settle_us + settle_us). Groups created on such an overlay get RPs that are not
    the closest nodes to their keys, and the nodes that join later get the JOINs and
    refuse them (they hold no group record). The check is at grid points of settle_us
    (the same for any shard count), so the phase ends settle_us to 2 settle_us after the
    last join."""
    stats = _run(topo_run, "bootstrap", last_stimulus, progress)
    waits = 0
    if topo_run.cfg.periodic:  # (else the run went on until no event was left: all joined)
        n, settle = topo_run.cfg.nodes, int(topo_run.cfg.phases["settle_us"])
        joined = _joined(topo_run)
        while joined < n and waits < MAX_JOIN_WAITS:
            waits += 1
            stats = _run(topo_run, "bootstrap", last_stimulus + waits * settle, progress)
            joined = _joined(topo_run)
        if waits:
            log.info("topology %d: the last joins ended up to %d us after the bootstrap's "
                     "planned end", topo_run.t, waits * settle)
            if joined < n:
                log.warning("topology %d: %d of %d nodes still not joined %d us after the "
                            "bootstrap's planned end", topo_run.t, n - joined, n,
                            waits * settle)
            stats = _run(topo_run, "bootstrap", last_stimulus + (waits + 1) * settle,
                         progress)
    stats["join_waits"] = waits
    return stats


def _overlay_quality(topo_run: TopologyRun, oracle) -> dict:
    """Protocol tables vs the oracle's exact PNS state (SPEC 2; ``oracle``: its
    :class:`_OracleBeside`; computed here if that process failed)."""
    from actors.pastry.quality import stack_states, table_quality
    parts = topo_run.emu.call("overlay_state")
    state = stack_states(parts, topo_run.cfg.nodes)
    oracle = oracle.result()
    if oracle is not None and \
            (oracle.b, oracle.l, oracle.nbr.shape[1]) != (state.b, state.l, state.nbr.shape[1]):
        raise RuntimeError(f"the oracle was computed for b, l, m = {oracle.b}, {oracle.l}, "
                           f"{oracle.nbr.shape[1]}, the shards run {state.b}, {state.l}, "
                           f"{state.nbr.shape[1]}")
    # routing loops are counted (looping_routes), not raised
    shared = topo_run.shared
    q = table_quality(state, shared["node_ids_hi"], shared["node_ids_lo"],
                      topo_run.topo.host_router, topo_run.topo.dist_matrix(),
                      topo_run.topo.lan_us,
                      n_routes=min(2000, 10 * topo_run.cfg.nodes), seed=topo_run.seed_t,
                      oracle=oracle)
    return {k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in q.items()}


def _phase_create(topo_run: TopologyRun, progress) -> dict:
    from actors.scribe import create_requests
    t0 = _start(topo_run)
    plan = topo_run.plan
    topo_run.emu.inject(create_requests(plan.creators, np.arange(plan.n_groups), t0,
                                        plan.credentials))
    return _run(topo_run, "create", t0, progress)


def _phase_join(topo_run: TopologyRun, progress) -> dict:
    from actors.scribe import join_requests
    plan = topo_run.plan
    t0 = _start(topo_run)
    topo_run.events.write("membership", topo_run.t, "join",
                          {"group": plan.member_group.astype(np.int32),
                           "member": plan.member_node.astype(np.int32)})
    times = join_times(topo_run.cfg.seed, topo_run.t, len(plan.member_node), t0,
                       topo_run.cfg.phases["join_spread_us"])
    topo_run.emu.inject(join_requests(plan.member_node, plan.member_group, times,
                                      plan.credentials[plan.member_group]))
    return _run(topo_run, "join", int(times.max(initial=t0)), progress)


def _phase_multicast(topo_run: TopologyRun, progress, phase: str, seqno: int) -> dict:
    from actors.scribe import multicast_requests
    t0 = _start(topo_run)
    plan = topo_run.plan
    topo_run.emu.inject(multicast_requests(topo_run.rp, np.arange(plan.n_groups), t0,
                                           plan.credentials, seqno=seqno))
    return _run(topo_run, phase, t0, progress)


def _phase_collapse(topo_run: TopologyRun, progress) -> dict:
    from actors.scribe import collapse_requests
    t0 = _start(topo_run)
    # every node gets the request; the roots act on it (docs/scribe.md)
    topo_run.emu.inject(collapse_requests(np.arange(topo_run.cfg.nodes), t0))
    return _run(topo_run, "collapse", t0, progress)


def _phase_churn(topo_run: TopologyRun, progress) -> dict:
    from actors.scribe import multicast_requests
    t0 = _start(topo_run)
    s = churn_schedule(topo_run.cfg, topo_run.t, t0, topo_run.rp, topo_run.plan)
    variant = "scribe"
    # numbering is per message when the reliable layer is off (seqno = stream tick index)
    seq = (s["pub_time"] - t0) // topo_run.cfg.churn["multicast_interval_us"] + 1
    topo_run.emu.inject(multicast_requests(s["pub_source"], s["pub_group"], s["pub_time"],
                                    topo_run.plan.credentials[s["pub_group"]], seqno=seq))
    if len(s["fail_node"]):
        topo_run.emu.fail(s["fail_node"], s["fail_time"])
    if len(s["rec_node"]):
        topo_run.emu.recover(s["rec_node"], s["rec_time"])
    topo_run.events.write("publish", topo_run.t, "churn",
                          {"group": s["pub_group"].astype(np.int32),
                           "source": s["pub_source"].astype(np.int32),
                           "time": s["pub_time"], "variant": [variant] * len(s["pub_time"])})
    ev_node = np.r_[s["fail_node"], s["rec_node"]].astype(np.int32)
    ev_time = np.r_[s["fail_time"], s["rec_time"]]
    ev = ["fail"] * len(s["fail_node"]) + ["recover"] * len(s["rec_node"])
    if len(ev_node):
        topo_run.events.write("node_event", topo_run.t, "churn",
                              {"node": ev_node, "time": ev_time, "event": ev})
    log.info("topology %d churn: %d multicasts, %d failures, %d recoveries", topo_run.t,
             len(s["pub_time"]), len(s["fail_node"]), len(s["rec_node"]))
    # churn needs keep-alives and heartbeats (config validation): the phase ends settle_us
    # after the schedule's end
    stats = _run(topo_run, "churn", s["end"], progress)
    stats["churn"] = {"multicasts": len(s["pub_time"]), "failures": len(s["fail_node"]),
                      "recoveries": len(s["rec_node"])}
    return stats


_MULTICAST_SEQ = {"multicast": 1, "multicast_collapsed": 2, "multicast_bottleneck": 3}


def _run_phase(topo_run: TopologyRun, phase: str, progress) -> dict:
    if phase == "bootstrap":
        return _phase_bootstrap(topo_run, progress)
    if phase == "create":
        return _phase_create(topo_run, progress)
    if phase == "join":
        return _phase_join(topo_run, progress)
    if phase in _MULTICAST_SEQ:
        return _phase_multicast(topo_run, progress, phase, _MULTICAST_SEQ[phase])
    if phase == "collapse":
        return _phase_collapse(topo_run, progress)
    if phase == "churn":
        return _phase_churn(topo_run, progress)
    raise ScenarioError(f"unknown phase {phase!r}")  # config validation prevents this


def load_rps(topo_run: TopologyRun) -> np.ndarray:
    """RP of every group from the `group` rows logged when each CREATE reached its root."""
    tbl = topo_run.events.read("group", topo_run.t)
    n_groups = topo_run.plan.n_groups
    rp = np.full(n_groups, -1, np.int64)
    if tbl is not None:
        g = tbl.column("group").to_numpy()
        rp[g] = tbl.column("rp").to_numpy()
    missing = np.flatnonzero(rp < 0)
    if len(missing):
        raise RuntimeError(f"topology {topo_run.t}: {len(missing)} of {n_groups} groups have "
                           f"no RP after the create phase (first: group {missing[0]})")
    return rp


def complete_phase(topo_run: TopologyRun, phase: str, state: RunState, done: list[str],
                    progress) -> None:
    """Run one phase, write its logs and checkpoint, then record it in state.json (last, so
    that a crash anywhere before leaves the phase to be replayed)."""
    emu = topo_run.emu
    w0 = time.perf_counter()
    stats = _run_phase(topo_run, phase, progress)
    topo_run.phase_end = _phase_end(topo_run, stats["until"])
    emu.call("dump", phase, phase=phase)    # end-of-phase rows (tree edges) of this phase
    topo_run.events.add(emu.flush(phase))
    if phase == "create":
        topo_run.rp = load_rps(topo_run)
    emu.checkpoint(phase)
    wall = time.perf_counter() - w0
    _record_phase(state, topo_run, phase, stats, wall)
    done.append(phase)
    state.d["completed"][str(topo_run.t)] = list(done)
    state.d.setdefault("phase_end", {})[str(topo_run.t)] = topo_run.phase_end
    state.save()
    rate = stats.get("messages", 0) / max(stats.get("wall_s", 0.0), 1e-9)
    log.info("topology %d phase %s: %d messages (%.1f %% by the Python loop), %d windows in "
             "%d driver rounds, virtual %d us, %.2f s emulation (%.0f msg/s; shard CPU %s s), "
             "%.2f s with dump/flush/checkpoint",
             topo_run.t, phase, stats.get("messages", 0), 100 * _python_share(stats),
             stats.get("windows", 0), stats.get("rounds", 0),
             stats.get("virtual_us", emu.now), stats.get("wall_s", 0.0), rate,
             " + ".join(f"{c:.2f}" for c in stats.get("cpu_s", [])) or "-", wall)


def _python_share(stats: dict) -> float:
    """The share of a phase's messages in passes the Python loop dispatched (the compiled
    cell loop handed them back, or left them to it); 0 for none."""
    return stats.get("python_messages", 0) / max(stats.get("messages", 0), 1)


def _record_phase(state: RunState, topo_run: TopologyRun, phase: str, stats: dict,
                  wall: float) -> None:
    """A completed phase's counts and times into state.json (not yet saved)."""
    state.add_time(f"phase_{phase}", wall)
    ph = state.d["phases"].setdefault(phase, {"messages": 0, "windows": 0,
                                              "wall_s": 0.0, "emulation_s": 0.0})
    ph["messages"] += int(stats.get("messages", 0))
    ph["python_messages"] = ph.get("python_messages", 0) + int(stats.get("python_messages", 0))
    ph["windows"] += int(stats.get("windows", 0))
    ph["wall_s"] = round(ph["wall_s"] + wall, 3)
    ph["emulation_s"] = round(ph["emulation_s"] + float(stats.get("wall_s", 0.0)), 3)
    if "quality" in stats:
        state.d["quality"][str(topo_run.t)] = stats["quality"]
    if "churn" in stats:
        state.d.setdefault("churn_schedule", {})[str(topo_run.t)] = stats["churn"]

