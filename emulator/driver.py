"""The driver: shards as Ray actors advanced in rounds on a global grid.

The driver is no hub and keeps out of the windows. Shards push their outgoing batches
straight to each other and bound each other's windows with promises
(emulator/shard_actor.py: each push says that nothing else from its sender will arrive
before a time; a shard runs every cell before the least promise it holds). The driver
only starts rounds: it keeps T_i, the earliest pending event of shard i (its queue, or a
batch pushed to it and not yet processed), picks the round's end (the earliest event
anywhere plus the window cap, see CAP_GROW_BELOW_S, or the phase's end), and tells every
shard that may have work before it what it knows: per shard i, the earliest time
anything can still happen there, ``min(T_i, min_k T_k + R_ki)`` with R the min-plus
closure of the lookahead matrix L (the smallest latency from a host of k to a host of i;
R's diagonal is the shortest round trip). From that alone each shard starts where the
old per-window driver barrier would have let it; the promises take it on from there.
Per round the driver makes one small call per shard that has work and fetches one small
tuple from each, whatever the number of windows inside; idle stretches cost nothing, as
T jumps to the next event. Results never depend on rounds or windows: cells are global
and message times exact.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import ray

from . import heads as round_heads
from .batch import ENGINE_DTYPE, Batch, SparseBatch, as_messages, check_message_dtype
from .engine import CONTROL_NAMES, FAIL, RECOVER, check_log_fields
from .errors import first_line
from .local_link import LinkClosed
from .queue import NEVER
from .shard_actor import SHARD_CONCURRENCY, RelayedError, ShardActor
from .storage import Storage, TableRef, ipc_bytes

INJECT_SEQ_BASE = -(1 << 62)  # injected stimuli sort before protocol messages of a node

# The window cap adapts to the wall time a window takes: where no lookahead bounds a window
# (one shard, or shards far apart) sparse traffic would otherwise pay a driver round trip
# per cap of virtual time (in a protocol bootstrap's sparse arrivals a window's round trip
# and idle shard cost a large share of its work; benchmarks/bench_scale.py reports the
# windows and the driver's time per window). The cap
# doubles while capped windows take less than CAP_GROW_BELOW_S, up to CAP_MAX_FACTOR times
# the configured cap, and halves back when one takes more than CAP_SHRINK_ABOVE_S (the
# progress display, redrawn every 0.5 s, stays fresh). The factor bounds how much traffic
# one window can hold when a sparse stretch is followed by a dense one (the display waits
# for the window's end): 51.2 s of virtual time at the default 200 ms. A round trip costs
# ~2 ms on one machine: in the faithful bootstrap at 10 arrivals/s on one shard a 3.2 s
# window holds ~15 ms of work, a 51.2 s one ~130 ms. Windows never change results (cells
# are global), so neither does the cap.
CAP_GROW_BELOW_S = 0.2
CAP_SHRINK_ABOVE_S = 1.0
CAP_MAX_FACTOR = 256


# The earliest times a round tells the shards follow the chains of messages from the
# EXACT_CAUSES shards with the earliest events exactly and bound those from the others
# together (caused_at): O(K x EXACT_CAUSES) per round rather than O(K^2) numpy, which at
# 1,000 shards is milliseconds of driver time a round (benchmarks/bench_driver_round.py
# measures both). Up to
# EXACT_CAUSES shards with events the bound is the exact one.
EXACT_CAUSES = 32

# A round with more than RELAY_ABOVE shards is started with one call: the driver calls the
# first shard, which calls RELAY_FANOUT others and so on down a tree over the round's shards
# (ShardActor.relay_round), and the heads come back up it. Each call costs its caller
# a fraction of a millisecond of CPU (Ray's own; benchmarks/bench_round_call.py measures
# it), which at K shards makes the driver a serial O(K) cost per round; the tree spreads
# those calls over the shards and adds O(log K) hops of latency, which below ~8 shards
# costs more than it saves.
RELAY_ABOVE = 8
RELAY_FANOUT = 4


class EmulationError(RuntimeError):
    """The emulation itself failed (a shard crashed or a handler raised)."""


class ShardLostError(EmulationError):
    """A shard's process (or the node it ran on) died: nothing in the emulation is wrong,
    so a new set of shards restored from the last checkpoint can replay the phase."""


def round_robin(n_nodes: int, shards: int) -> np.ndarray:
    return (np.arange(n_nodes) % shards).astype(np.int32)


def control_messages(nodes, at_us: int, code: int, dtype=ENGINE_DTYPE) -> np.ndarray:
    """Engine control stimuli (FAIL / RECOVER) for `nodes` at `at_us`, ready to inject:
    records of `dtype` (the stack's), protocol columns zero -- the engine handles them."""
    nodes = np.atleast_1d(np.asarray(nodes, np.int64))
    m = np.zeros(len(nodes), dtype)
    m["src"] = m["dst"] = nodes
    m["time"] = m["sent"] = at_us
    m["type"] = code
    return m


def reach_matrix(lookahead: np.ndarray) -> np.ndarray:
    """int64[K, K]: entry (i, j) is the least delay of a chain of messages of one hop or
    more from shard i to shard j -- the min-plus closure of `lookahead` (whose diagonal is
    NEVER), so the diagonal is the shortest round trip i -> ... -> i. An event of shard i
    at t can cause nothing at shard j before t + reach[i, j]. Floyd-Warshall, O(K^3) once.
    """
    k = len(lookahead)
    big = np.int64(1) << 61                      # NEVER, scaled so that two sum safely
    reach = np.minimum(np.asarray(lookahead, np.int64), big)
    for m in range(k):
        np.minimum(reach, reach[:, m:m + 1] + reach[m:m + 1, :], out=reach)
    reach[reach >= big] = NEVER
    return reach


def window_ends(next_at: np.ndarray, reach: np.ndarray, delta_us: int, cap_us: int,
                limit: int) -> np.ndarray:
    """Per shard j, the grid point before which it may process every cell:
    ``floor(min(min_i next_at[i] + reach[i, j], first + cap_us) / Δ)·Δ``, at most `limit`,
    where `first` is the earliest event anywhere and `reach` is :func:`reach_matrix` (i = j
    included: a message of j can come back to j through another shard). O(K^2) numpy over
    the shards that have events. The shard(s) holding `first` always make progress since
    every reach >= Δ. (The in-process LocalEmulator's windows; the Ray shards find their
    own, see :func:`earliest_causes`.)
    """
    d = int(delta_us)
    first = int(next_at.min())
    bound = np.full(len(next_at), first + int(cap_us), np.int64)
    np.minimum(bound, caused_at(next_at, reach), out=bound)
    ends = (bound // d) * d
    np.minimum(ends, limit, out=ends)
    return np.maximum(ends, first - first % d + d)


def caused_at(next_at: np.ndarray, reach: np.ndarray, reach_min: np.ndarray | None = None,
              exact: int | None = None) -> np.ndarray:
    """Per shard j, the earliest time a chain of messages from any shard (j included) can
    make something happen at j: ``min_i next_at[i] + reach[i, j]``. O(K x shards with
    events), numpy.

    With ``reach_min`` (``reach.min(axis=0)``) and more than ``exact`` shards with events,
    a lower bound instead, in O(K x exact): exact for the ``exact`` earliest shards, and
    ``T + reach_min[j]`` for all the others at once, T the earliest next event among them
    (each of them is at T or later, and reaches j in reach_min[j] or more). A lower bound
    is all a round needs: a shard told an earlier time only waits for promises it did not
    need or takes part in a round with nothing to do; results never depend on rounds."""
    bound = np.full(len(next_at), NEVER, np.int64)
    busy = np.flatnonzero(next_at < NEVER)
    if len(next_at) <= 1 or not len(busy):
        return bound
    rest = NEVER
    if reach_min is not None and exact is not None and len(busy) > exact:
        order = np.argpartition(next_at[busy], exact)       # the exact earliest first
        rest = int(next_at[busy[order[exact]]])
        busy = busy[order[:exact]]
        np.minimum(bound, rest + np.minimum(reach_min, NEVER - rest), out=bound)
    if len(busy):
        headroom = NEVER - int(next_at[busy].max())          # no int64 overflow
        arrive = next_at[busy, None] + np.minimum(reach[busy], headroom)
        np.minimum(bound, arrive.min(axis=0), out=bound)
    return bound


def earliest_causes(next_at: np.ndarray, reach: np.ndarray, reach_min: np.ndarray | None = None,
                    exact: int | None = None) -> np.ndarray:
    """Per shard, the earliest time anything can still happen there: its own next event,
    or one that a chain of messages from a shard's next event can cause
    (:func:`caused_at`, exact or, with ``reach_min`` and ``exact``, a lower bound). What a
    round tells every shard, so that each knows at once how far each peer may get before
    it hears from it."""
    return np.minimum(next_at, caused_at(next_at, reach, reach_min, exact))


class Emulator:
    """Drive `shards` ShardActors over `n_nodes` nodes (see docs/ARCHITECTURE.md)."""

    def __init__(self, n_nodes: int, latency, stack_factory, shards: int = 1, node_shard=None,
                 seed: int = 0, shared: dict | None = None, run_dir=None, topo_index: int = 0,
                 type_names: dict | None = None, log_messages: bool = True,
                 window_cap_us: int = 200_000, actor_options: dict | None = None,
                 storage=None, handoff: bool = False, message_dtype=ENGINE_DTYPE,
                 message_log_fields=(), relay_above: int = RELAY_ABOVE,
                 relay_fanout: int = RELAY_FANOUT, exact_causes: int = EXACT_CAUSES,
                 local_links: bool = True):
        if not ray.is_initialized():
            raise EmulationError("Ray is not initialised: call runtime.ray_spark.start_ray() first")
        self.n_nodes = int(n_nodes)
        # the stack's message record and the protocol columns its message log keeps
        self.message_dtype = check_message_dtype(message_dtype)
        self.message_log_fields = check_log_fields(self.message_dtype, message_log_fields)
        if self.n_nodes < 1:
            raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
        if len(latency.host_router) != self.n_nodes:
            raise ValueError(f"latency model has {len(latency.host_router)} hosts for "
                             f"{self.n_nodes} nodes")
        if node_shard is None:
            shards = int(shards)
            if not 1 <= shards <= self.n_nodes:
                raise ValueError(f"shards must be in 1..{self.n_nodes}, got {shards}")
            node_shard = round_robin(self.n_nodes, shards)
        node_shard = np.ascontiguousarray(node_shard, np.int32)
        if node_shard.shape != (self.n_nodes,) or node_shard.min() < 0:
            raise ValueError("node_shard must give a shard >= 0 for every node")
        self.shards = int(node_shard.max()) + 1
        if len(np.unique(node_shard)) != self.shards:
            raise ValueError("node_shard leaves a shard without nodes")
        self.node_shard = node_shard
        self.delta_us = int(latency.min_latency_us())
        if self.delta_us < 1:
            raise ValueError("the smallest latency between two hosts is 0: no time grid")
        # lookahead[i, j]: least latency from shard i to shard j (NEVER on the diagonal)
        self.lookahead = latency.lookahead_matrix_us(node_shard)
        self.lookahead_us = int(self.lookahead.min()) if self.shards > 1 else NEVER
        self.reach = reach_matrix(self.lookahead)   # chains of messages, round trips too
        self.reach_min = self.reach.min(axis=0)      # for the rest of caused_at's bound
        self.exact_causes = int(exact_causes)
        if self.exact_causes < 1:
            raise ValueError(f"exact_causes must be >= 1, got {exact_causes}")
        self.window_cap_us = max(int(window_cap_us), self.delta_us)
        self._cap_us = self.window_cap_us     # the adapted cap (CAP_GROW_BELOW_S), per `run`
        self.relay_above = int(relay_above)   # rounds with more shards go through the tree
        self.relay_fanout = int(relay_fanout)
        if self.relay_fanout < 1:
            raise ValueError(f"relay_fanout must be >= 1, got {relay_fanout}")
        self.seed = int(seed)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        # storage: where shards write logs and checkpoints (default the run directory);
        # handoff: logs go to the driver as object refs (`flush`, `logs`), and without a
        # storage the shards' checkpoint state is kept by the driver under run_dir
        self.handoff = bool(handoff)
        if storage is None and self.run_dir is not None and not self.handoff:
            storage = self.run_dir
        self.storage = Storage(storage) if storage is not None else None
        self.topo_index = int(topo_index)
        self.type_names = {**CONTROL_NAMES, **{int(k): v for k, v in (type_names or {}).items()}}
        # no shard has processed a cell at or after `now`, so stimuli may start there (the end
        # of the last cell any shard processed, not of its window: that depends on the cap)
        self.now = 0
        self._next_at = np.full(self.shards, NEVER, np.int64)   # T_i per shard
        self._inbox: list[list] = [[] for _ in range(self.shards)]  # injected, not yet sent
        self._inject_seq = 0
        self._refs: dict[str, list[TableRef]] = {}
        self._windows = 0
        self._round_number = 0
        self._cells_sum = 0
        self._phase_stats: dict[str, dict] = {}

        shared_refs = {k: ray.put(v) for k, v in (shared or {}).items()}
        lat_ref = ray.put(latency)
        ns_ref = ray.put(node_shard)
        if not isinstance(actor_options, list | tuple):
            actor_options = [actor_options] * self.shards
        self._actors = [
            ShardActor.options(**{"num_cpus": 0, "max_concurrency": SHARD_CONCURRENCY,
                                  "scheduling_strategy": "SPREAD",  # over a cluster's nodes
                                  **(actor_options[k] or {})}).remote(
                k, ns_ref, lat_ref, stack_factory, self.seed, self.delta_us, shared_refs,
                log_messages, self.storage, self.topo_index, self.handoff,
                self.message_dtype, self.message_log_fields)
            for k in range(self.shards)]
        # stacks may schedule timers in setup (joins, keep-alives): the first event times
        try:
            self._next_at[:] = self._get([a.ready.remote() for a in self._actors], "setup")
            look_ref = ray.put(self.lookahead)
            # shards of one Ray node push to each other over local links, not Ray calls
            links = self._get([a.link_address.remote() for a in self._actors], "setup") \
                if local_links and self.shards > 1 else None
            self._get([a.connect.remote(self._actors, look_ref, links) for a in self._actors],
                      "setup")
        except BaseException:
            self.shutdown()          # no shard outlives a failed start (a retry makes new ones)
            raise
        if self.storage is not None or self.handoff:
            self._write_type_table()

    # ---- helpers ----------------------------------------------------------------------
    def _get(self, refs, what: str, shard_ids=None, at_us=None):
        """ray.get that turns a crashed shard or a failing handler into one clear error.
        `shard_ids` names the shard of each ref when they are not all shards in order;
        `at_us` the virtual time the error names (default `now`; a window's start)."""
        at = self.now if at_us is None else int(at_us)
        try:
            self._wait_all(refs)
            return ray.get(refs)
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
            # the process died (killed, OOM, node lost) or took in-flight batches with it
            k = self._which_failed(refs, shard_ids)
            raise ShardLostError(f"shard {k} crashed during {what} at virtual time "
                                 f"{at} us: {first_line(e)}") from e
        except ray.exceptions.RayTaskError as e:
            k = self._which_failed(refs, shard_ids)
            cause = e.cause if getattr(e, "cause", None) is not None else e
            raise self._shard_error(k, cause, what, at, refs, shard_ids) from e

    def _relay(self, due, era, limit, phase, earliest, at_us) -> tuple:
        """Round `self._round_number` on the shards `due` through the tree of relay calls
        (ShardActor.relay_round): one call and one result for the driver, whatever the
        number of shards. Returns the round's heads, joined (emulator/heads.py)."""
        injected = {k: self._inbox[k] for k in due if self._inbox[k]}
        ref = self._actors[due[0]].relay_round.remote(
            (tuple(due), self.relay_fanout, 0), self._round_number, era, limit, phase, earliest,
            injected)
        try:
            return ray.get(ref)
        except Exception as e:  # noqa: BLE001 - turned into the error `_get` would raise
            raise self._relay_failure(e, due, f"phase {phase!r}", at_us) from e

    def _relay_failure(self, e, due, what: str, at: int) -> Exception:
        """The error of a relayed round, as `_get` words it (`_shard_error`): the shard is
        the one the RelayedError names, or the first shard when its own process died."""
        cause = e.cause if isinstance(e, ray.exceptions.RayTaskError) else e
        k = due[0]                      # the first shard's process died under the call
        if isinstance(cause, RelayedError):
            k, cause = cause.shard, cause.error
        return self._shard_error(k, cause, what, at,
                                 [self._actors[j].ready.remote() for j in due], due)

    def _shard_error(self, k, cause, what: str, at: int, probe, probe_ids) -> Exception:
        """The one error the driver raises for shard `k` failing with `cause`:
        ShardLostError when a process died (k could not push to a dead peer, or died
        itself: the dead one is found among the calls `probe`, of shards `probe_ids`),
        OSError for a failed log or checkpoint write (disk full, read-only: the runner
        reports storage errors itself, wherever they happen), else EmulationError naming
        the shard whose handler raised. A `cause` that is a call's error is unwrapped to
        its own cause (a push through another machine's gateway that failed there)."""
        while isinstance(cause, ray.exceptions.RayTaskError) and cause.cause is not None:
            cause = cause.cause
        if isinstance(cause, (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError,
                              LinkClosed)):
            dead = self._dead_shard(probe, probe_ids)
            who = f"shard {dead}" if dead is not None else f"a peer of shard {k}"
            return ShardLostError(f"{who} crashed during {what} at virtual time {at} us: "
                                  f"{first_line(cause)}")
        if isinstance(cause, OSError) and cause.errno is not None:
            return OSError(cause.errno, f"shard {k} during {what}: {cause.strerror}",
                           cause.filename)
        return EmulationError(f"shard {k} failed during {what} at virtual time {at} us: "
                              f"{type(cause).__name__}: {first_line(cause)}")

    @staticmethod
    def _wait_all(refs) -> None:
        """Wait until every call of `refs` has finished, or raise the error of the first
        one that failed: in a round, a shard whose peer died waits for it, so one failure
        must not wait for the others. One `ray.wait` per second while they run."""
        left = list(refs)
        while len(left) > 1:
            done, left = ray.wait(left, num_returns=len(left), timeout=1.0)
            if left:
                ray.get(done)          # raises if one of them failed

    def _dead_shard(self, refs, shard_ids=None):
        """The shard among `refs` whose process died (its call raises RayActorError), once
        the calls have settled (a few seconds at most); None if none of them did."""
        ray.wait(refs, num_returns=len(refs), timeout=10)
        for i, r in enumerate(refs):
            try:
                ray.get(r, timeout=0)
            except ray.exceptions.RayActorError:
                return i if shard_ids is None else shard_ids[i]
            except Exception:  # noqa: BLE001 - other failures are not what we look for
                continue
        return None

    def _which_failed(self, refs, shard_ids=None):
        for i, r in enumerate(refs):
            try:
                ray.get(r, timeout=0)
            except ray.exceptions.GetTimeoutError:
                continue                 # still running: not the one that failed
            except Exception:  # noqa: BLE001 - we are only locating the failure
                return i if shard_ids is None else shard_ids[i]
        return "?"

    def _write_type_table(self):
        import pyarrow as pa

        from .logs import with_topo
        codes = sorted(self.type_names)
        tbl = pa.table({"type": pa.array(codes, pa.int16()),
                        "name": pa.array([self.type_names[c] for c in codes], pa.string()),
                        "phase": pa.array(["static"] * len(codes), pa.string())})
        if self.handoff:
            tbl = with_topo(tbl, self.topo_index)
            self._refs["message_type"] = [TableRef(ray.put(ipc_bytes(tbl)), tbl.schema,
                                                   tbl.num_rows, self.topo_index, "static")]
        else:
            self.storage.write_parquet(tbl, "message_type", self.topo_index, "types")

    # ---- stimuli ----------------------------------------------------------------------
    def inject(self, msgs) -> None:
        """External stimuli (requests, scheduled events) due at their `time`: a Batch or
        array of message records (columns matched by name to the stack's record)."""
        msgs, payload = (msgs.msgs, msgs.payload) if isinstance(msgs, Batch) else (msgs, None)
        if not len(msgs):
            return
        m = as_messages(msgs, self.message_dtype)
        b = Batch(m.copy() if m is msgs else m, payload)
        m = b.msgs
        if (m["time"] < self.now).any():
            raise ValueError(f"inject: message due at {int(m['time'].min())} us, before the "
                             f"current virtual time {self.now} us")
        if ((m["dst"] < 0) | (m["dst"] >= self.n_nodes)).any():
            raise ValueError("inject: destination outside 0..n_nodes-1")
        m["seq"] = INJECT_SEQ_BASE + self._inject_seq + np.arange(len(m))
        self._inject_seq += len(m)
        shard = self.node_shard[m["dst"]]
        for k in np.unique(shard).tolist():
            part = b.take(shard == k)
            # the fields it sets only: the object store keeps what a shard was sent
            self._inbox[k].append(ray.put(SparseBatch(part)))
            self._next_at[k] = min(self._next_at[k], int(part.msgs["time"].min()))

    def _control(self, nodes, at, code):
        self.inject(control_messages(nodes, at, code, self.message_dtype))

    def fail(self, nodes, at_us) -> None:
        """Crash `nodes` at the cell holding `at_us`: their messages and timers are dropped."""
        self._control(nodes, at_us, FAIL)

    def recover(self, nodes, at_us) -> None:
        self._control(nodes, at_us, RECOVER)

    # ---- running ----------------------------------------------------------------------
    @property
    def _next(self) -> int:
        """The earliest pending event anywhere."""
        return int(self._next_at.min())

    def run(self, phase: str, until: int | None = None, progress=None) -> dict:
        """Process every cell that starts before `until` (all events when None).

        In rounds: each round ends at a grid point `limit`, at most the window cap past the
        earliest event anywhere; every shard that may have something to do before it runs
        there at its own pace (the shards bound each other's windows with promises,
        emulator/shard_actor.py), and the driver hears from each once per round."""
        d = self.delta_us
        limit = NEVER if until is None else -(-int(until) // d) * d
        t0 = time.perf_counter()
        c0 = time.thread_time()   # the driver's own CPU: its work, not waiting for a core
        rounds = calls = 0
        round_us = 0
        wait_s = 0.0          # blocked on shards; the rest of the loop is the driver's own work
        # next events and totals from the heads; per shard: wall time processing cells,
        # that thread's CPU time, and the wait for peers (their promises, and their taking
        # this shard's pushes)
        tally = round_heads.RoundTally(self._next_at)
        last_report = t0
        self._cap_us = self.window_cap_us     # phases differ: each learns its own cap
        # the shards' promises hold within this call: stimuli injected since the last one
        # may be due before what an idle shard promised then (emulator/shard_actor.py)
        era = self._round_number + 1
        while self._next < limit:
            t_round = time.perf_counter()
            first = self._next
            start = first - first % d
            end = min(max((first + self._cap_us) // d * d, start + d), limit)
            earliest = earliest_causes(self._next_at, self.reach, self.reach_min,
                                       self.exact_causes)
            due = np.flatnonzero(earliest < end).tolist()
            self._round_number += 1
            t_wait = time.perf_counter()
            if len(due) > self.relay_above:
                heads = self._relay(due, era, end, phase, earliest.tobytes(), start)
                calls += 1
            else:
                # raw bytes: a numpy argument costs the driver ~1.5x the CPU per call (its
                # pickling; benchmarks/bench_round_call.py); above 64 shards one shared copy
                arg = earliest.tobytes() if self.shards <= 64 else ray.put(earliest)
                refs = [self._actors[k].run_round.remote(self._round_number, era, end, phase,
                                                         arg, *self._inbox[k])
                        for k in due]
                heads = round_heads.join(self._get(refs, f"phase {phase!r}", due, start))
                calls += len(due)
            wait_s += time.perf_counter() - t_wait
            if round_heads.count(heads) != len(due):
                raise EmulationError(f"round {self._round_number} of phase {phase!r}: "
                                     f"{round_heads.count(heads)} heads from {len(due)} shards")
            for k in due:
                self._inbox[k] = []
            # every shard's head at once (emulator/heads.py): numpy, not a loop over shards
            left = tally.add(heads)
            self.now = max(self.now, tally.done_until)
            rounds += 1
            round_us += end - start
            self._adapt_cap(time.perf_counter() - t_round, end < limit and not left)
            if progress is not None and time.perf_counter() - last_report > 0.5:
                last_report = time.perf_counter()
                progress(phase, self.now, tally.events)
        if until is not None:
            self.now = max(self.now, limit)
        wall = time.perf_counter() - t0
        if progress is not None:
            progress(phase, self.now, tally.events)
        self._windows += tally.windows
        per_shard = tally.per_shard
        stats = {"rounds": rounds, "rounds_ended_early": tally.early, "windows": tally.windows,
                 "left_bounded": tally.bounded,
                 "shard_calls": calls, "messages": tally.events,
                 "python_messages": tally.python_events,
                 "promise_pushes": tally.promises, "promise_wants": tally.wants,
                 "virtual_us": self.now, "wall_s": wall,
                 **{key: total.tolist() for key, total in per_shard.items()},
                 "sync_s": max(0.0, wall - float(per_shard["busy_s"].max(initial=0.0))),
                 "driver_s": wall - wait_s, "driver_cpu_s": time.thread_time() - c0,
                 "round_us_total": int(round_us),
                 "round_us_mean": round_us / rounds if rounds else 0.0}
        prev = self._phase_stats.get(phase)
        if prev:
            for key in ("rounds", "rounds_ended_early", "left_bounded", "windows",
                        "shard_calls", "messages", "python_messages",
                        "promise_pushes", "promise_wants", "wall_s", "sync_s",
                        "driver_s", "driver_cpu_s", "round_us_total"):
                stats[key] += prev.get(key, 0)
            for key in round_heads.PER_SHARD_TIMES:   # (an older checkpoint lacks some)
                stats[key] = [a + b for a, b in
                              zip(stats[key], prev.get(key, [0.0] * self.shards), strict=True)]
            stats["round_us_mean"] = stats["round_us_total"] / max(stats["rounds"], 1)
        self._phase_stats[phase] = stats
        return stats

    def _adapt_cap(self, window_s: float, capped: bool) -> None:
        """Double the window cap after a quick capped window, halve it after a slow one."""
        if capped and window_s < CAP_GROW_BELOW_S:
            self._cap_us = min(2 * self._cap_us, CAP_MAX_FACTOR * self.window_cap_us)
        elif window_s > CAP_SHRINK_ABOVE_S:
            self._cap_us = max(self._cap_us // 2, self.window_cap_us)

    @property
    def idle(self) -> bool:
        return self._next == NEVER

    # ---- profiling --------------------------------------------------------------------
    def profile_rounds(self, on: bool = True) -> None:
        """Profile every shard's rounds (CPU clock, one profile per phase) from now on;
        off: stop and drop them (ShardActor.profile_rounds)."""
        self._get([a.profile_rounds.remote(on) for a in self._actors], "profile_rounds")

    def dump_profiles(self, directory) -> list[str]:
        """Every shard's profiles as ``directory``/shard<k>-<phase>.prof (pstats; the
        directory must be one the shards can write to: this machine's, or shared)."""
        paths = self._get([a.dump_profiles.remote(str(directory)) for a in self._actors],
                          "dump_profiles")
        return [p for shard in paths for p in shard]

    # ---- stack calls, logs ------------------------------------------------------------
    def call(self, method: str, *args, phase: str | None = None) -> list:
        """stack.<method>(ctx, *args) on every shard, results in shard order. `phase`
        names the phase the rows it logs belong to (e.g. end-of-phase snapshots)."""
        return self._get([a.call.remote(method, *args, phase=phase) for a in self._actors],
                         f"call {method}")

    def flush(self, phase: str) -> dict[str, list[TableRef]]:
        """Every shard's buffered log rows: written as Parquet under the storage, or (hand-off)
        returned as refs owned by this driver. Returns {table: [TableRef]} of this flush
        (hand-off only; empty otherwise); `logs` has every flush's."""
        metas = self._get([a.flush.remote(phase) for a in self._actors], f"flush {phase}")
        new: dict[str, list[TableRef]] = {}
        if not self.handoff:
            return new
        for a, meta in zip(self._actors, metas, strict=True):
            if not meta:
                continue
            refs = a.take_tables.options(num_returns=len(meta)).remote()
            refs = [refs] if len(meta) == 1 else refs
            for (name, schema, rows), ref in zip(meta, refs, strict=True):
                new.setdefault(name, []).append(TableRef(ref, schema, rows, self.topo_index,
                                                         phase))
        for n, rs in new.items():
            self._refs.setdefault(n, []).extend(rs)
        return new

    def logs(self, table: str) -> list[TableRef]:
        """The hand-off's refs of `table` so far (the runner takes the static
        `message_type` table from here; `flush` returns the rest as it goes)."""
        return list(self._refs.get(table, []))

    def counters(self) -> dict:
        per_shard = self._get([a.counters.remote() for a in self._actors], "counters")
        name = self.type_names.get
        # the shards' counts by type code, summed under the types' names
        by_type: dict[str, dict[str, int]] = {
            k: {} for k in ("sent_by_type", "lost_by_type", "python_by_type",
                            "handed_back_by_type")}
        counts: dict[str, int] = {}
        for c in per_shard:
            for key, total in by_type.items():
                for t, v in c.get(key, {}).items():
                    total[name(t, str(t))] = total.get(name(t, str(t)), 0) + v
            for k, v in c["counts"].items():
                counts[k] = counts.get(k, 0) + v
        sent, lost = by_type["sent_by_type"], by_type["lost_by_type"]
        python, handed_back = by_type["python_by_type"], by_type["handed_back_by_type"]
        return {"shards": self.shards, "delta_us": self.delta_us,
                "lookahead_us": None if self.lookahead_us == NEVER else self.lookahead_us,
                "windows": self._windows, "virtual_us": self.now,
                "messages_sent": sent, "lost": lost, "lost_total": sum(lost.values()),
                "python_by_type": python, "handed_back_by_type": handed_back,
                "counts": counts, "phases": self._phase_stats,
                "per_shard": [{**{k: c[k] for k in ("shard", "nodes", "events", "python_events",
                                                    "cells", "busy_s", "cpu_s", "pending",
                                                    "alive")},
                               "events_per_s": c["events"] / c["busy_s"] if c["busy_s"] else 0.0}
                              for c in per_shard]}

    # ---- checkpoints ------------------------------------------------------------------
    def _checkpoint_store(self) -> Storage:
        """Where checkpoints live: the shards' storage, else (hand-off without storage) the
        driver's run directory, the shards sending their state here."""
        if self.storage is not None:
            return self.storage
        if self.run_dir is None:
            raise EmulationError("checkpoints need a run directory")
        return Storage(self.run_dir)

    def checkpoint(self, name: str) -> str:
        """Save every shard's state (in-flight messages included) under checkpoints/<name>/."""
        store = self._checkpoint_store()
        self._next_at[:] = self._get([a.accept.remote(*self._inbox[k])
                                      for k, a in enumerate(self._actors)], "checkpoint")
        self._inbox = [[] for _ in range(self.shards)]
        states = self._get([a.save.remote(name) for a in self._actors], "checkpoint")
        for k, data in enumerate(states):
            if data is not None:                 # a shard without storage sent its state
                store.write_bytes(data, "checkpoints", name, f"shard{k}.pkl")
        meta = {"shards": self.shards, "now": self.now, "next": self._next,
                "inject_seq": self._inject_seq, "windows": self._windows,
                "phase_stats": self._phase_stats, "n_nodes": self.n_nodes}
        store.write_bytes(json.dumps(meta).encode(), "checkpoints", name, "driver.json")
        return store.path("checkpoints", name)

    def restore(self, name: str) -> None:
        """Continue from checkpoints/<name>/ (this Emulator must be built with the same args)."""
        store = self._checkpoint_store()
        where = store.path("checkpoints", name)
        meta = json.loads(store.read_bytes("checkpoints", name, "driver.json"))
        if meta["shards"] != self.shards or meta["n_nodes"] != self.n_nodes:
            raise EmulationError(f"checkpoint {where} was made with {meta['shards']} shards "
                                 f"and {meta['n_nodes']} nodes, not {self.shards} and "
                                 f"{self.n_nodes}")
        if self.storage is not None:
            calls = [a.load.remote(name) for a in self._actors]
        else:
            calls = [a.load.remote(name, ray.put(store.read_bytes("checkpoints", name,
                                                                  f"shard{k}.pkl")))
                     for k, a in enumerate(self._actors)]
        nexts = self._get(calls, "restore")
        self._inbox = [[] for _ in range(self.shards)]
        self.now, self._inject_seq = meta["now"], meta["inject_seq"]
        self._windows, self._phase_stats = meta["windows"], meta["phase_stats"]
        self._next_at[:] = nexts

    def shutdown(self) -> None:
        for a in self._actors:
            ray.kill(a)
        self._actors = []
