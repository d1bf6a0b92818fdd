"""Run a scenario into a run directory: topologies, emulation phases, Spark analysis.

Per topology seed t the runner builds the topology, the node ids and the group plan, starts
an `Emulator` of Pastry+Scribe shards and drives the configured phases:

  bootstrap            oracle: nothing to run; protocol: the join protocol on the clock,
                       then the table quality against the oracle (run.log, summary.json)
  create               CREATE of every group by its creator -> `group` rows (the RPs)
  join                 JOIN of every member (`membership` rows written by the runner)
  multicast[_*]        one message per group from its RP (variants: plain, collapsed,
                       bottleneck -- each in its own phase so link stress separates them)
  collapse             collapse requests at every node
  churn                a stream of multicasts while nodes fail and recover (`publish` and
                       `node_event` rows written by the runner)

At the end of every phase: the stacks' ``dump`` (tree snapshots), ``emu.flush`` (Parquet, or refs),
``emu.checkpoint``; `state.json` records the completed phases, so ``--resume`` restores the
last checkpoint and continues with identical results. Files are written in an order that
never makes a half-done run look complete: `COMPLETE` comes last.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import re
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np

from emulator.storage import cache_dir

from .config import ScenarioConfig, ScenarioError, load_scenario
from .event_logs import RunEvents, layout_for
from .groups import GroupPlan, join_times, plan_groups

log = logging.getLogger("scribe_emu.scenario")


class RunStopped(RuntimeError):
    """The run stopped for a reason outside its inputs (a shard lost more often than
    run.retries allows, a full or read-only disk). Completed phases are kept; the message
    (one line) ends with the command that resumes the run."""

    def __init__(self, message: str, run_dir: Path, remedy: str | None = None):
        self.run_dir = Path(run_dir)
        remedy = remedy or f"resume with: {resume_command(run_dir)}"
        super().__init__(f"{message}; completed phases are kept, {remedy}")


def resume_command(run_dir: Path) -> str:
    """The command line that continues the run in `run_dir`."""
    return f"python cli.py scenario --resume {run_dir}"


# errors of a write that more space, or a writable directory, would have let through
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                   errno.EFBIG}


def _warn(message: str) -> None:
    """A warning of ours: in run.log and, one line, on the console (stderr)."""
    log.warning(message)
    print(f"warning: {message}", file=sys.stderr, flush=True)

CACHE_DIR = cache_dir()
_STREAM_CHURN = 0xC4E2
# Event logs reach Spark as Parquet (one machine, or a named run.storage) or through the
# object store (a multi-node cluster without storage): scenarios/event_logs.py. The
# object-store path is RayDP's JVM reader, not Ray Data's `to_spark` (a pandas UDF per
# block at every use, far too slow for tables of millions of rows, and its tasks wait for
# cores that Spark holds): analysis/load.py `load_refs`.


# ---- run directory ------------------------------------------------------------------------

def _new_run_dir(cfg: ScenarioConfig, out: Path | None) -> Path:
    if out is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = Path("runs") / f"{cfg.name}-{stamp}"
        k = 1
        while run_dir.exists():            # two runs in one second
            k += 1
            run_dir = Path("runs") / f"{cfg.name}-{stamp}-{k}"
    else:
        run_dir = Path(out)
        if run_dir.exists() and any(run_dir.iterdir()):
            raise ScenarioError(f"output directory {run_dir} exists and is not empty; choose "
                                "another --out or use --resume to continue it")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


class _State:
    """state.json: completed phases per topology, timings, counters (survives a crash)."""

    def __init__(self, path: Path):
        self.path = path
        self.d = json.loads(path.read_text()) if path.is_file() else {
            "completed": {}, "topologies_done": [], "timing": {}, "phases": {},
            "quality": {}, "counters": {}, "resumed": 0}

    def save(self):
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.d, indent=1, default=_json_default))
        os.replace(tmp, self.path)

    def completed(self, t: int) -> list[str]:
        return list(self.d["completed"].get(str(t), []))

    def add_time(self, key: str, seconds: float):
        self.d["timing"][key] = round(self.d["timing"].get(key, 0.0) + float(seconds), 3)


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


class _RunLogHandler(logging.FileHandler):
    """run.log; a write that fails (full disk) is dropped quietly rather than printing a
    logging traceback: the run's own writes report the problem in one line."""

    def handleError(self, record):  # noqa: N802 - logging's name
        pass


def _setup_logging(run_dir: Path) -> logging.Handler:
    try:
        h = _RunLogHandler(run_dir / "run.log")
    except OSError as e:
        raise RunStopped(f"cannot write {run_dir / 'run.log'}: {e.strerror or e}",
                         run_dir) from None
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False
    return h


def _phase_of_file(stem: str) -> str:
    return re.split(r"-(?:shard\d+|driver)", stem, maxsplit=1)[0]


# ---- progress -----------------------------------------------------------------------------

class _Progress:
    """One status line (rich) with phase, virtual time and message rate; no-op when off."""

    def __init__(self, enabled: bool, n_topos: int):
        self.enabled = enabled
        self.n_topos = n_topos
        self._p = None
        self.topo = 0
        self._t0 = time.perf_counter()

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
            self._p = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                               TimeElapsedColumn(), console=Console(stderr=True),
                               transient=False)
            self._p.__enter__()
            self._task = self._p.add_task("starting", total=None)
        return self

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)

    def status(self, text: str):
        log.info(text)
        if self._p is not None:
            self._p.update(self._task, description=text)

    def start_phase(self):
        self._t0 = time.perf_counter()

    def __call__(self, phase: str, virtual_us: int, messages: int):
        if self._p is None:
            return
        dt = max(time.perf_counter() - self._t0, 1e-9)
        self._p.update(self._task, description=(
            f"topology {self.topo + 1}/{self.n_topos}  {phase:<20} "
            f"virtual {virtual_us / 1e6:9.3f} s"
            f"  {messages:>12,} msgs  {messages / dt:>10,.0f} msg/s"))


# ---- one topology -----------------------------------------------------------------------

@dataclasses.dataclass
class _TopologyRun:
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


def _build_topology(cfg: ScenarioConfig, t: int, seed_t: int):
    from topologies import TopologyError, make_topology
    try:
        tc = cfg.topology
        topo = make_topology(tc["source"], seed_t, cfg.nodes, cache_dir=CACHE_DIR,
                             lan_us=tc["lan_us"], placement=tc["placement"],
                             lan_hosts_per_router=tc["lan_hosts_per_router"],
                             mean_core_delay_us=tc["mean_core_delay_ms"] * 1000.0)
    except TopologyError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ScenarioError(f"topology {cfg.topology['source']!r}: {first}") from None
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


def _phase_end(topo_run: _TopologyRun, until: int | None) -> int:
    """When the phase just run ended, the same for any number of shards: the grid point it
    ran to when bounded, else just after the last event anywhere. (The driver's `now` is
    the end of its last window, which depends on the lookahead and so on the partition.)"""
    if until is not None:
        return int(topo_run.emu.now)
    return max(int(x) for x in topo_run.emu.call("clock")) + int(topo_run.emu.delta_us)


def _start(topo_run: _TopologyRun) -> int:
    """Virtual time of the next phase's first stimulus: a gap after the last phase's end."""
    t0 = topo_run.phase_end + int(topo_run.cfg.phases["gap_us"])
    if t0 < topo_run.emu.now:
        raise ScenarioError(f"phases.gap_us = {topo_run.cfg.phases['gap_us']} is shorter than "
                            "the emulator's last window "
                            f"({topo_run.emu.now - topo_run.phase_end} us); raise it")
    return t0


def _run(topo_run: _TopologyRun, phase: str, last_stimulus: int, progress) -> dict:
    until = last_stimulus + topo_run.cfg.phases["settle_us"] if topo_run.cfg.periodic else None
    progress.start_phase()
    stats = topo_run.emu.run(phase, until=until, progress=progress)
    stats["until"] = until
    return stats


def _phase_bootstrap(topo_run: _TopologyRun, progress) -> dict:
    cfg = topo_run.cfg
    if cfg.pastry["bootstrap"] == "oracle":
        return {"windows": 0, "messages": 0, "virtual_us": int(topo_run.emu.now), "wall_s": 0.0,
                "until": 0}
    from actors.pastry.join import join_schedule
    p = cfg.pastry_params(topo_run.seed_t)
    arrivals = join_schedule(cfg.nodes, p["join_rate_per_s"], p.get("join_start_us", 0),
                             p["seed"])
    last = int(arrivals[-1]) + int(topo_run.emu.delta_us) + 1
    # the join protocol stops by itself unless keep-alives run; then give it settle_us
    until = last + p["join_settle_us"] + cfg.phases["settle_us"] if cfg.periodic else None
    progress.start_phase()
    stats = topo_run.emu.run("bootstrap", until=until, progress=progress)
    stats["until"] = until
    stats["quality"] = _overlay_quality(topo_run)
    log.info("topology %d: protocol bootstrap table quality %s", topo_run.t, stats["quality"])
    return stats


def _overlay_quality(topo_run: _TopologyRun) -> dict:
    """Protocol tables vs the oracle's exact PNS state (SPEC 2)."""
    from actors.pastry.quality import stack_states, table_quality
    parts = topo_run.emu.call("overlay_state")
    state = stack_states(parts, topo_run.cfg.nodes)
    # routing loops are counted (looping_routes), not raised
    shared = topo_run.shared
    q = table_quality(state, shared["node_ids_hi"], shared["node_ids_lo"],
                      topo_run.topo.host_router, shared["router_dist_us"], topo_run.topo.lan_us,
                      n_routes=min(2000, 10 * topo_run.cfg.nodes), seed=topo_run.seed_t)
    return {k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in q.items()}


def _phase_create(topo_run: _TopologyRun, progress) -> dict:
    from actors.scribe import create_requests
    t0 = _start(topo_run)
    plan = topo_run.plan
    topo_run.emu.inject(create_requests(plan.creators, np.arange(plan.n_groups), t0,
                                        plan.credentials))
    return _run(topo_run, "create", t0, progress)


def _phase_join(topo_run: _TopologyRun, progress) -> dict:
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


def _phase_multicast(topo_run: _TopologyRun, progress, phase: str, seqno: int) -> dict:
    from actors.scribe import multicast_requests
    t0 = _start(topo_run)
    plan = topo_run.plan
    topo_run.emu.inject(multicast_requests(topo_run.rp, np.arange(plan.n_groups), t0,
                                           plan.credentials, seqno=seqno))
    return _run(topo_run, phase, t0, progress)


def _phase_collapse(topo_run: _TopologyRun, progress) -> dict:
    from actors.scribe import collapse_requests
    t0 = _start(topo_run)
    # every node gets the request; the roots act on it (docs/scribe.md)
    topo_run.emu.inject(collapse_requests(np.arange(topo_run.cfg.nodes), t0))
    return _run(topo_run, "collapse", t0, progress)


def _stream_sources(rng, plan: GroupPlan, rp: np.ndarray, n_stream: int) -> np.ndarray:
    """Each streaming group's source: a uniformly drawn member other than its RP."""
    sources = np.empty(n_stream, np.int64)
    for g in range(n_stream):
        m = plan.members_of(g)
        m = m[m != rp[g]] if len(m) > 1 else m
        sources[g] = m[rng.integers(len(m))]
    return sources


def _rp_failures(cfg: ScenarioConfig, t: int, t0: int, rp_of_streams: np.ndarray,
                 protected: np.ndarray) -> tuple[list, list]:
    """RPs of streaming groups that fail for good, inside the first 2/3 of the stream (time
    left to fail over), from their own random stream (the random failures draw as they
    would without them). Returns (nodes, times), in time order."""
    c = cfg.churn
    if not c.get("rp_failures", 0):
        return [], []
    rrng = np.random.default_rng([cfg.seed, t, _STREAM_CHURN, 1])
    cand = np.unique(rp_of_streams[~protected[rp_of_streams]])
    pick = rrng.permutation(cand)[: c["rp_failures"]]
    lo, hi = t0 + c["warmup_us"], t0 + (2 * c["duration_us"]) // 3
    when = rrng.integers(lo, max(hi, lo + 1), len(pick))
    pairs = sorted(zip(pick.tolist(), when.tolist(), strict=True), key=lambda x: x[1])
    return [v for v, _ in pairs], [w for _, w in pairs]


def _random_failures(cfg: ScenarioConfig, rng, start: int, end: int, protected: np.ndarray,
                     down_until: np.ndarray):
    """Poisson failures of live unprotected nodes in [start, end), each recovering after an
    exponential downtime unless downtime_us = 0 or it would come after the end.
    ``down_until`` (per node: -1 alive, else until when) is updated. Yields
    (node, fail time, recovery time or None)."""
    c, never = cfg.churn, np.iinfo(np.int64).max
    rate, now = c["fail_rate_per_s"], start
    while rate > 0:
        now += int(np.ceil(rng.exponential(1e6 / rate)))
        if now >= end:
            return
        alive = (~protected) & ((down_until < 0) | (down_until <= now))
        cand = np.flatnonzero(alive)
        if len(cand) == 0:
            return
        v = int(cand[rng.integers(len(cand))])
        back = None
        if c["downtime_us"] > 0:
            back = now + max(1, int(np.ceil(rng.exponential(c["downtime_us"]))))
            back = back if back < end else None
        down_until[v] = never if back is None else back
        yield v, now, back


def churn_schedule(cfg: ScenarioConfig, t: int, t0: int, rp: np.ndarray, plan: GroupPlan):
    """The churn phase's stimuli, deterministic in (seed, t).

    Streaming groups multicast every interval from a fixed source: a member that never
    fails (so delivery ratios measure the tree, not a dead source); RPs and forwarders do
    fail. Failures: Poisson at fail_rate_per_s from t0 + warmup, each a uniformly chosen
    live non-source node; each recovers after an exponential downtime (mean downtime_us)
    unless downtime_us = 0; plus churn.rp_failures RPs failing for good.
    Returns dict of arrays: pub_group, pub_source, pub_time, fail_node, fail_time,
    rec_node, rec_time.
    """
    c = cfg.churn
    rng = np.random.default_rng([cfg.seed, t, _STREAM_CHURN])
    n_groups = plan.n_groups
    n_stream = n_groups if c["stream_groups"] == 0 else min(n_groups, c["stream_groups"])
    groups = np.arange(n_stream)
    sources = _stream_sources(rng, plan, rp, n_stream)
    protected = np.zeros(cfg.nodes, bool)
    protected[sources] = True
    end = t0 + c["duration_us"]
    ticks = np.arange(t0, end, c["multicast_interval_us"], dtype=np.int64)
    pub_group = np.tile(groups, len(ticks))
    fail_node, fail_time = _rp_failures(cfg, t, t0, rp[groups], protected)
    down_until = np.full(cfg.nodes, -1, np.int64)     # -1: alive; else recovery time (or max)
    down_until[fail_node] = np.iinfo(np.int64).max
    rec_node, rec_time = [], []
    for v, when, back in _random_failures(cfg, rng, t0 + c["warmup_us"], end, protected,
                                          down_until):
        fail_node.append(v)
        fail_time.append(when)
        if back is not None:
            rec_node.append(v)
            rec_time.append(back)
    i64 = lambda x: np.asarray(x, np.int64)  # noqa: E731
    return {"pub_group": pub_group, "pub_source": sources[pub_group],
            "pub_time": np.repeat(ticks, n_stream),
            "fail_node": i64(fail_node), "fail_time": i64(fail_time),
            "rec_node": i64(rec_node), "rec_time": i64(rec_time), "end": end}


def _phase_churn(topo_run: _TopologyRun, progress) -> dict:
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
    progress.start_phase()
    until = s["end"] + topo_run.cfg.phases["settle_us"]
    stats = topo_run.emu.run("churn", until=until, progress=progress)
    stats["until"] = until
    stats["churn"] = {"multicasts": len(s["pub_time"]), "failures": len(s["fail_node"]),
                      "recoveries": len(s["rec_node"])}
    return stats


_MULTICAST_SEQ = {"multicast": 1, "multicast_collapsed": 2, "multicast_bottleneck": 3}


def _run_phase(topo_run: _TopologyRun, phase: str, progress) -> dict:
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


def _load_rps(topo_run: _TopologyRun) -> np.ndarray:
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


@dataclasses.dataclass
class _TopologyInputs:
    """What every attempt at topology t shares: the topology, its group plan, latency model
    and the read-only tables the shards receive."""
    topo: object
    plan: GroupPlan
    latency: object
    shared: dict


def _prepare_topology(cfg, run_dir: Path, t: int, state: _State, progress) -> _TopologyInputs:
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
    shared = {"node_ids_hi": ids_hi, "node_ids_lo": ids_lo, "host_router": lat.host_router,
              "router_dist_us": lat.router_dist_us, "lan_us": int(lat.lan_us),
              "groups": plan.table}
    return _TopologyInputs(topo, plan, lat, shared)


def _run_topology(cfg, run_dir, t, state: _State, events, progress) -> None:
    """Every phase of topology t not yet completed. A shard whose process dies is replaced:
    the topology's shards are started again from the last completed phase's checkpoint and
    the phase replayed (run.retries times), which gives the same results as no failure."""
    from emulator import ShardLostError

    inputs = _prepare_topology(cfg, run_dir, t, state, progress)
    retries = int(cfg.run["retries"])
    for attempt in range(retries + 1):
        try:
            _emulate_topology(cfg, run_dir, t, state, events, progress, inputs)
            break
        except ShardLostError as e:
            done = state.completed(t)
            where = f"checkpoint {done[-1]!r}" if done else "the start"
            if attempt == retries:
                raise RunStopped(f"{e} (replayed {retries} time(s) already; run.retries = "
                                 f"{retries})", run_dir) from e
            _warn(f"{e}; restarting topology {t}'s shards from {where} "
                  f"(retry {attempt + 1} of {retries})")
    state.d["topologies_done"].append(t)
    state.save()


def _start_emulator(cfg, t: int, inputs: _TopologyInputs, events, progress):
    """The shard actors of topology t (the Emulator), logging in the run's layout."""
    from actors.messages import MESSAGE_LOG_FIELDS, MSG_DTYPE
    from actors.stack import stack_factory, type_names
    from emulator import Emulator

    seed_t = cfg.seed + t
    progress.status(f"topology {t + 1}/{cfg.topologies}: starting {cfg.shards} shard(s)")
    emu = Emulator(n_nodes=cfg.nodes, latency=inputs.latency,
                   stack_factory=stack_factory(cfg.pastry_params(seed_t), cfg.scribe_params()),
                   shards=cfg.shards, node_shard=_node_shard(cfg, inputs.topo), seed=seed_t,
                   shared=inputs.shared, run_dir=events.run_dir, topo_index=t,
                   type_names=type_names(), message_dtype=MSG_DTYPE,
                   message_log_fields=MESSAGE_LOG_FIELDS, **events.emulator_options())
    events.add_emulator(emu)
    log.info("topology %d: %d routers, %d hosts, delta %d us, lookahead %s us, %d shards",
             t, inputs.topo.n_routers, cfg.nodes, emu.delta_us, emu.lookahead_us, emu.shards)
    return emu


def _emulate_topology(cfg, run_dir, t, state: _State, events, progress,
                      inputs: _TopologyInputs) -> None:
    """Start the shards of topology t, restore its last checkpoint and run the phases left."""
    done = state.completed(t)
    events.clean_incomplete(t, done, _phase_of_file)
    w0 = time.perf_counter()
    emu = _start_emulator(cfg, t, inputs, events, progress)
    topo_run = _TopologyRun(cfg, run_dir, t, cfg.seed + t, inputs.topo, inputs.plan, emu,
                            inputs.shared, events)
    state.add_time("emulator_setup", time.perf_counter() - w0)
    try:
        if done:
            emu.restore(done[-1])    # restore() takes the shards' next event times
            log.info("topology %d: restored checkpoint %r (virtual %d us)", t, done[-1], emu.now)
        else:
            _log_hosts(topo_run)
        if "create" in done:
            topo_run.rp = _load_rps(topo_run)
        topo_run.phase_end = int(state.d.setdefault("phase_end", {}).get(str(t), 0))
        for phase in cfg.phase_order:
            if phase not in done:
                _complete_phase(topo_run, phase, state, done, progress)
        _record_counters(state, t, emu.counters())
    finally:
        emu.shutdown()


def _log_hosts(topo_run: _TopologyRun) -> None:
    """The static `host` rows of a topology: each node's router and Pastry id."""
    from actors.pastry.ids import to_hex
    shared = topo_run.shared
    topo_run.events.write("host", topo_run.t, "bootstrap", {
        "node": np.arange(topo_run.cfg.nodes, dtype=np.int32),
        "router": topo_run.topo.host_router.astype(np.int32),
        "id_hex": list(to_hex(shared["node_ids_hi"], shared["node_ids_lo"]))})


def _record_counters(state: _State, t: int, c: dict) -> None:
    state.d["counters"][str(t)] = {
        "messages_sent": c["messages_sent"], "lost_total": c["lost_total"],
        "counts": c["counts"], "delta_us": c["delta_us"], "lookahead_us": c["lookahead_us"],
        "windows": c["windows"], "virtual_us": c["virtual_us"]}


def _complete_phase(topo_run: _TopologyRun, phase: str, state: _State, done: list[str],
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
        topo_run.rp = _load_rps(topo_run)
    emu.checkpoint(phase)
    wall = time.perf_counter() - w0
    _record_phase(state, topo_run, phase, stats, wall)
    done.append(phase)
    state.d["completed"][str(topo_run.t)] = list(done)
    state.d.setdefault("phase_end", {})[str(topo_run.t)] = topo_run.phase_end
    state.save()
    rate = stats.get("messages", 0) / max(stats.get("wall_s", 0.0), 1e-9)
    log.info("topology %d phase %s: %d messages, %d windows in %d driver rounds, "
             "virtual %d us, %.2f s emulation (%.0f msg/s; shard CPU %s s), %.2f s with "
             "dump/flush/checkpoint",
             topo_run.t, phase, stats.get("messages", 0), stats.get("windows", 0),
             stats.get("rounds", 0),
             stats.get("virtual_us", emu.now), stats.get("wall_s", 0.0), rate,
             " + ".join(f"{c:.2f}" for c in stats.get("cpu_s", [])) or "-", wall)


def _record_phase(state: _State, topo_run: _TopologyRun, phase: str, stats: dict,
                  wall: float) -> None:
    """A completed phase's counts and times into state.json (not yet saved)."""
    state.add_time(f"phase_{phase}", wall)
    ph = state.d["phases"].setdefault(phase, {"messages": 0, "windows": 0,
                                              "wall_s": 0.0, "emulation_s": 0.0})
    ph["messages"] += int(stats.get("messages", 0))
    ph["windows"] += int(stats.get("windows", 0))
    ph["wall_s"] = round(ph["wall_s"] + wall, 3)
    ph["emulation_s"] = round(ph["emulation_s"] + float(stats.get("wall_s", 0.0)), 3)
    if "quality" in stats:
        state.d["quality"][str(topo_run.t)] = stats["quality"]
    if "churn" in stats:
        state.d.setdefault("churn_schedule", {})[str(topo_run.t)] = stats["churn"]


# ---- analysis -----------------------------------------------------------------------------

def _summary_extra(cfg: ScenarioConfig, state: _State) -> dict:
    d = state.d
    extra = {"timing": dict(d["timing"]), "emulation": {"phases": d["phases"]}}
    counters = d["counters"]
    if counters:
        first = next(iter(counters.values()))
        extra["emulation"].update({"delta_us": first["delta_us"],
                                   "lookahead_us": first["lookahead_us"],
                                   "shards": cfg.shards,
                                   "windows": sum(c["windows"] for c in counters.values()),
                                   "lost_messages": sum(c["lost_total"]
                                                        for c in counters.values())})
        total: dict[str, int] = {}
        for c in counters.values():
            for k, v in c["counts"].items():
                total[k] = total.get(k, 0) + int(v)
        extra["emulation"]["counters"] = dict(sorted(total.items()))
    if d["quality"]:
        extra["overlay_quality"] = d["quality"]
    if d.get("churn_schedule"):
        extra["churn_schedule"] = d["churn_schedule"]
    return extra


def _analysis_options(cfg: ScenarioConfig):
    from actors.stack import type_names
    from analysis.schema import AnalysisOptions
    names = {f.name for f in dataclasses.fields(AnalysisOptions)}
    kw = {"type_names": type_names(),
          "shared_storage": True if cfg.analysis["shared_storage"] else None}
    if "churn_phases" in names and "churn" in cfg.phase_order:
        kw["churn_phases"] = ("churn",)
    return AnalysisOptions(**kw)


def _scenario_meta(cfg: ScenarioConfig) -> dict:
    return {"scenario": cfg.name, "nodes": cfg.nodes, "groups": cfg.groups,
            "topologies": cfg.topologies, "seed": cfg.seed, "shards": cfg.shards,
            "topology_source": cfg.topology["source"], "bootstrap": cfg.pastry["bootstrap"],
            "phases": cfg.phase_order}


def _analyse(cfg, run_dir: Path, state: _State, events: RunEvents, progress) -> dict:
    """Spark (RayDP) over the run's event logs -- Parquet files, or the hand-off's object
    refs -- then the report. A lost executor stops Spark, starts a fresh session and runs
    the analysis again (it only reads the logs and rewrites its CSVs), up to run.retries
    times; past them RunStopped names the command that reruns it."""
    from analysis.report import write_report

    retries = int(cfg.run["retries"])
    for attempt in range(retries + 1):
        try:
            summary = _analyse_once(cfg, run_dir, state, events, progress)
            break
        except Exception as e:   # noqa: BLE001 - only a lost executor is retried
            lost = getattr(e, "spark_lost", None) or (_first_line(e) if spark_lost(e) else None)
            if lost is None:
                raise
            _stop_spark_quietly()      # a session with a lost executor never recovers
            if attempt == retries:
                raise RunStopped(f"Spark lost an executor during the analysis ({lost}; "
                                 f"restarted {retries} time(s) already; run.retries = "
                                 f"{retries})", run_dir, remedy=_rerun_analysis_command(
                                     run_dir, events)) from e
            _warn(f"analysis: Spark lost an executor ({lost}); restarting Spark and the "
                  f"analysis (retry {attempt + 1} of {retries})")
    write_report(run_dir)
    return summary


# How long an executor may be gone (its Ray actor restarting, or Spark listing none) before
# the analysis step is abandoned and retried: a restarted RayDP executor that rejoins does
# so within seconds, one that does not never will (emulator.runtime.watch_executors).
EXECUTOR_GRACE_S = 30.0


def _analyse_once(cfg, run_dir: Path, state: _State, events: RunEvents, progress) -> dict:
    """One try of the analysis on the running (or a new) Spark session; an error while
    the executor watch saw an executor lost carries that as ``spark_lost``."""
    from analysis import run_analysis
    from emulator.runtime import spark_running, watch_executors
    from scenarios.analysis_spark import start_analysis_spark

    if not spark_running():     # else started beside the emulation (SparkWarmup) or earlier
        progress.status("analysis: starting Spark (RayDP)")
    w0 = time.perf_counter()
    spark = start_analysis_spark(cfg)
    state.add_time("spark_start", time.perf_counter() - w0)
    progress.status("analysis: computing metrics in Spark")
    with watch_executors(spark, grace_s=EXECUTOR_GRACE_S) as watch:
        try:
            return run_analysis(run_dir, spark, refs=events.refs(), events=events.root(),
                                scenario_meta=_scenario_meta(cfg),
                                extra=_summary_extra(cfg, state),
                                options=_analysis_options(cfg))
        except Exception as e:
            if watch["lost"]:
                e.spark_lost = watch["lost"]
            raise


def _stop_spark_quietly() -> None:
    """raydp.stop_spark on a session that lost an executor: whatever it raises (the dead
    actor, a broken Py4J link) the next try starts a new session anyway."""
    from emulator.runtime import stop_spark
    try:
        stop_spark(release=True)
    except Exception:  # noqa: BLE001 - see above
        log.warning("stopping the broken Spark session failed", exc_info=True)


def _rerun_analysis_command(run_dir: Path, events: RunEvents) -> str:
    """What reruns the analysis alone: `analyze` reads kept Parquet logs; a hand-off run
    kept none, only --resume (which emulates again) can."""
    if events.layout.handoff:
        return f"resume with: {resume_command(run_dir)}"
    return (f"rerun the analysis with: python cli.py analyze {run_dir} "
            f"(or {resume_command(run_dir)})")


# What Spark and RayDP say when an executor (a Ray actor) or the driver's link to it died;
# anything else (a bug, bad data) fails the same way again and is not retried.
_SPARK_LOST = re.compile(r"ExecutorLostFailure|executor \S+ (?:lost|exited)|Lost executor|"
                         r"SparkContext (?:was|has been) shut down|RayActorError|"
                         r"Py4JNetworkError|Answer from Java side is empty|"
                         r"Connection refused|Python worker exited unexpectedly|"
                         r"Worker exited unexpectedly", re.IGNORECASE)


def spark_lost(exc: BaseException) -> bool:
    """True when `exc` (from the analysis) means Spark lost an executor or its JVM."""
    seen = 0
    while exc is not None and seen < 5:
        if _SPARK_LOST.search(f"{type(exc).__name__}: {exc}"):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


# ---- memory --------------------------------------------------------------------------------

def check_memory(cfg: ScenarioConfig, *, force: bool = False, cluster: bool = False,
                 total: int | None = None) -> None:
    """Refuse (ScenarioError) a run whose memory estimate exceeds this machine's memory (or
    the connected Ray cluster's), before it starts, rather than be killed by the OOM
    killer hours in. `force` logs the estimate and goes on."""
    from .memory import estimate_memory, format_bytes, machine_memory
    need = estimate_memory(cfg)
    have = machine_memory(cluster=cluster) if total is None else int(total)
    where = "the Ray cluster's" if cluster else "this machine's"
    if need["total"] <= have:
        log.info("memory estimate %s of %s %s", format_bytes(need["total"]), where,
                 format_bytes(have))
        return
    parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in need.items() if k != "total" and v)
    msg = (f"run needs about {format_bytes(need['total'])} of memory ({parts}), more than "
           f"{where} {format_bytes(have)}")
    if force:
        _warn(f"{msg}; going on (--force)")
        return
    raise ScenarioError(f"{msg}; use fewer nodes/groups, a cluster (--address), or --force "
                        "to try anyway")


# ---- entry point --------------------------------------------------------------------------

def run_scenario(cfg, *, out: Path | None = None, address: str | None = None,
                 resume: Path | None = None, progress: bool = True,
                 force: bool = False) -> Path:
    """Run `cfg` (a ScenarioConfig or a scenario name) and return the run directory.

    resume: a run directory of an interrupted run; its config.toml is used (cfg may be
    None) and completed phases are skipped by restoring the last checkpoint.
    force: run even when the memory estimate exceeds the machine's (or cluster's) memory.
    Raises ScenarioError on bad input (and on a run that cannot fit), RunStopped when the
    run stops for an outside reason (shard lost past run.retries, full disk); a
    KeyboardInterrupt leaving here carries ``resume_command``. A failed run keeps its
    directory without COMPLETE (or loses it entirely when it failed before any work).
    """
    cfg = _start_runtime(cfg, out, address, resume, force)
    created = resume is None
    run_dir = _new_run_dir(cfg, out) if created else Path(resume)
    if created:
        (run_dir / "config.toml").write_text(cfg.to_toml())
    handler = _setup_logging(run_dir)
    state = _State(run_dir / "state.json")
    started_work = bool(state.d["completed"])
    try:
        events = _open_events(cfg, run_dir, state, resumed=not created)
        _run_and_analyse(cfg, run_dir, state, events, progress)
        log.info("run complete: %s", run_dir)
        return run_dir
    except ScenarioError:
        log.exception("scenario failed on bad input")
        if created and not _has_work(run_dir, started_work or bool(state.d["completed"])):
            _remove(run_dir, handler)
            handler = None
        raise
    except OSError as e:
        if e.errno not in _STORAGE_ERRNOS:
            log.exception("run failed (resume with %s)", resume_command(run_dir))
            raise
        log.exception("a write failed: the run stops")
        raise RunStopped(f"cannot write {e.filename or 'to the run directory'}: "
                         f"{e.strerror or e}", run_dir) from None
    except KeyboardInterrupt as e:
        log.warning("interrupted (resume with %s)", resume_command(run_dir))
        e.resume_command = resume_command(run_dir)
        raise
    except BaseException:
        log.exception("run failed (resume with %s)", resume_command(run_dir))
        raise
    finally:
        if handler is not None:
            log.removeHandler(handler)
            handler.close()


def _start_runtime(cfg, out, address, resume, force) -> ScenarioConfig:
    """The validated configuration, with Ray started (or joined) and the memory checked
    (before anything is written on an embedded Ray; on a cluster once connected)."""
    embedded = not (address or os.environ.get("RAY_ADDRESS"))
    cfg = _scenario_to_run(cfg, out, resume)
    if embedded:
        check_memory(cfg, force=force)
    from emulator.runtime import start_ray
    start_ray(address)                        # a bad --address fails here, in seconds
    if not embedded:
        check_memory(cfg, force=force, cluster=True)
    return cfg


def _open_events(cfg, run_dir: Path, state: _State, resumed: bool) -> RunEvents:
    """The run's event-log layout (event_logs.py): recorded in state.json at the start, kept
    on resume. A resumed hand-off run starts its emulation again: its logs lived in the
    object store of the process that stopped (same results, the time is lost)."""
    if resumed:
        state.d["resumed"] = state.d.get("resumed", 0) + 1
    layout = layout_for(cfg.run, state.d.get("event_logs"))
    if resumed and layout.handoff and state.d["completed"]:
        _warn("resume: this run handed its event logs to Spark through the object store "
              "(no run.storage), and they ended with the process that stopped; its "
              "emulation starts again (name a run.storage to resume from checkpoints)")
        for key in ("completed", "phase_end", "phases", "quality", "counters",
                    "churn_schedule"):
            state.d[key] = {}
        state.d["topologies_done"] = []
    state.d["event_logs"] = layout.as_dict()
    state.save()
    log.info("event logs: %s", "object store (hand-off to Spark)" if layout.handoff else
             f"Parquet under {layout.storage or run_dir}")
    return RunEvents(run_dir, layout)


# Below this many nodes per shard a window's synchronisation costs more than a second shard
# saves: on two cores `churn` (3,000 nodes) is slower on two shards than on one, a
# 10,000-node overlay no faster, `small_groups_30k` (50,000 nodes) faster
# (benchmarks/bench_scale.py measures a scenario's phases at each K).
MIN_NODES_PER_SHARD = 10_000


def auto_shards(cpus: int, nodes: int) -> int:
    """Shards for ``shards = 0``: one per CPU, but at most one per MIN_NODES_PER_SHARD
    nodes (a small overlay runs faster whole; results are the same for any count)."""
    return max(1, min(int(cpus), int(nodes) // MIN_NODES_PER_SHARD))


def emulate_only(cfg: ScenarioConfig, run_dir: Path) -> None:
    """Topology 0 of `cfg` emulated into the new directory `run_dir` (its event logs and
    state), on the Ray already started, without the analysis: scenarios/warm.py's run."""
    run_dir = _new_run_dir(cfg, run_dir)
    (run_dir / "config.toml").write_text(cfg.to_toml())
    handler = _setup_logging(run_dir)
    try:
        state = _State(run_dir / "state.json")
        events = _open_events(cfg, run_dir, state, resumed=False)
        with _Progress(False, 1) as progress:
            _run_topology(cfg, run_dir, 0, state, events, progress)
    finally:
        log.removeHandler(handler)
        handler.close()


def _run_and_analyse(cfg, run_dir: Path, state: _State, events: RunEvents,
                     progress: bool) -> None:
    """Emulate every topology not done yet, analyse, write timing.total and COMPLETE."""
    t_start = time.perf_counter()
    if cfg.shards == 0:  # one shard per CPU of the cluster; recorded for --resume
        import ray
        cpus = int(ray.cluster_resources().get("CPU", 1))
        cfg.run["shards"] = auto_shards(cpus, cfg.nodes)
        (run_dir / "config.toml").write_text(cfg.to_toml())
    log.info("scenario %s: %d nodes, %d groups, %d topologies, %d shards -> %s", cfg.name,
             cfg.nodes, cfg.groups, cfg.topologies, cfg.shards, run_dir)
    warmup = _spark_warmup(cfg, run_dir)
    with _Progress(progress, cfg.topologies) as prog:
        try:
            for t in range(cfg.topologies):
                if t not in state.d["topologies_done"]:
                    _run_topology(cfg, run_dir, t, state, events, prog)
        finally:
            if warmup is not None:
                warmup.cancel()
        state.add_time("emulation_total", time.perf_counter() - t_start)
        state.save()
        if warmup is not None:
            prog.status("analysis: waiting for Spark to start (started with the emulation)")
            for key, seconds in warmup.finish().items():
                state.add_time(key, seconds)
        _analyse(cfg, run_dir, state, events, prog)
    _record_total(run_dir, state, time.perf_counter() - t_start)
    (run_dir / "COMPLETE").write_text(datetime.now().isoformat(timespec="seconds") + "\n")


def _spark_warmup(cfg, run_dir: Path):
    """Spark started and warmed up beside the emulation (scenarios/analysis_spark.py), when
    `analysis.warmup` is on (auto: the machine has a CPU the shards leave free; on two
    cores busy with two shards the emulation loses about what the analysis gains), the Ray
    cluster is this machine (the warm-up run lives in a local
    temporary directory) and no Spark session is up yet (a running one is warm)."""
    from emulator.runtime import ray_is_local, spark_running
    from scenarios.analysis_spark import SparkWarmup

    mode = cfg.analysis["warmup"]
    spare_cpu = (os.cpu_count() or 1) > cfg.shards
    if mode == "off" or (mode == "auto" and not spare_cpu) or not ray_is_local() \
            or spark_running():
        return None
    return SparkWarmup(cfg, run_dir / "topology" / "topo-0.npz").start()


def _scenario_to_run(cfg, out: Path | None, resume: Path | None) -> ScenarioConfig:
    """The validated configuration: the resumed run's config.toml, or `cfg` (a config or a
    scenario name) for a new run whose --out must be new or empty."""
    if resume is not None:
        run_dir = Path(resume)
        if not (run_dir / "config.toml").is_file():
            raise ScenarioError(f"cannot resume {run_dir}: no config.toml there (not a run "
                                "directory)")
        if (run_dir / "COMPLETE").exists():
            raise ScenarioError(f"run {run_dir} is already complete; nothing to resume")
        resumed = load_scenario(str(run_dir / "config.toml"))
        if isinstance(cfg, ScenarioConfig) and cfg != resumed:
            # the run continues as it started; other options would change its results
            log.warning("resume: using %s/config.toml, not the options given now", run_dir)
        return resumed
    if isinstance(cfg, str):
        cfg = load_scenario(cfg)
    if not isinstance(cfg, ScenarioConfig):
        raise ScenarioError("run_scenario needs a ScenarioConfig (from load_scenario) or a "
                            "scenario name")
    if out is not None and Path(out).exists() and any(Path(out).iterdir()):
        raise ScenarioError(f"output directory {out} exists and is not empty; choose "
                            "another --out or use --resume to continue it")
    return cfg


def _record_total(run_dir: Path, state: _State, seconds: float) -> None:
    """summary.json timing.total: the run's whole wall time (Ray start, emulation, Spark
    start, analysis, report) in this invocation (a resumed run: since the resume)."""
    from analysis.output import write_json
    state.add_time("total", seconds)
    state.save()
    path = run_dir / "summary.json"
    summary = json.loads(path.read_text())
    summary.setdefault("timing", {})["total"] = state.d["timing"]["total"]
    write_json(summary, path)


def _has_work(run_dir: Path, started: bool) -> bool:
    """Whether a failed new run did something worth keeping (a completed phase, whatever
    the layout, or event files under the run directory)."""
    return started or (run_dir / "events").is_dir() and any((run_dir / "events").iterdir())


def _remove(run_dir: Path, handler) -> None:
    log.removeHandler(handler)
    handler.close()
    shutil.rmtree(run_dir, ignore_errors=True)
