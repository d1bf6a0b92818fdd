"""Small worlds for the protocol tests, on the product's engine.

A world is a synthetic router network (node ids, host routers, router distances: the
shared data the stack reads), the real Pastry + Scribe stack (``actors.stack``) built from
complete parameter dicts, and ``emulator.local.LocalEmulator``: K ``ShardEngine``s in this
process advanced in the Ray driver's window bounds -- no Ray, no files.

This module is the one place that knows how a stack gets its parameters and where the
protocols keep their state, so that a redesign of ``actors/`` changes only this file:

- parameters: the scenario schema's defaults, through ``scenarios.config.build_config``
  and its ``pastry_params`` / ``scribe_params`` accessors (what a scenario run hands the
  stack), plus the few protocol knobs the schema does not expose (e.g. ``root_paths``);
- state: the public queries (``overlay_state``, ``dump``, the event logs and counters),
  and, where a test must look inside, the functions under "internal access" below.
"""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa

from actors.messages import MSG_DTYPE
from actors.pastry import ids as pastry_ids
from actors.pastry.quality import route_paths, stack_states
from actors.pastry.synthetic import synthetic_network
from actors.stack import OverlayStack, make_stack
from emulator.latency import RouterLatency
from emulator.local import LocalEmulator
from scenarios.config import build_config

PHASE = "test"

# Protocol parameters outside the scenario schema (they have protocol defaults and no
# scenario key): passed through as given.
PASTRY_EXTRA = ("hop_ack", "ack_slack_us", "join_start_us", "rejoin_timeout_us")
SCRIBE_EXTRA = ("variant", "groups_key", "root_paths", "root_path_max")


# ---- parameters -------------------------------------------------------------------------
def _split(params: dict, extra: tuple[str, ...]) -> tuple[dict, dict]:
    schema = {k: v for k, v in params.items() if k not in extra}
    return schema, {k: v for k, v in params.items() if k in extra}


def stack_params(n_nodes: int, seed: int, pastry: dict | None = None,
                 scribe: dict | None = None) -> tuple[dict, dict]:
    """Complete (pastry_params, scribe_params) as a scenario of ``n_nodes`` nodes with
    these [pastry] / [scribe] settings hands them to the stack (topology seed ``seed``).
    A bad value fails here with the scenario's one-line error."""
    p_schema, p_extra = _split(dict(pastry or {}), PASTRY_EXTRA)
    s_schema, s_extra = _split(dict(scribe or {}), SCRIBE_EXTRA)
    # phases: only the overlay's, so no phase rule of a scenario constrains the protocols
    cfg = build_config("protocol-test", {"run": {"nodes": int(n_nodes)},
                                         "phases": {"order": ["bootstrap"]},
                                         "pastry": p_schema, "scribe": s_schema})
    return {**cfg.pastry_params(int(seed)), **p_extra}, {**cfg.scribe_params(), **s_extra}


# ---- networks ---------------------------------------------------------------------------
def network(n_nodes: int, n_routers: int, seed: int, span_us: int = 100_000,
            groups: dict | None = None) -> dict:
    """Shared data of a world: a synthetic network (ids, host_router, router_dist_us,
    lan_us) and, for Scribe, the group table under "groups"."""
    net = synthetic_network(n_nodes, n_routers, seed, span_us=span_us)
    if groups is not None:
        net["groups"] = groups
    return net


def root_of(net: dict, key_hi, key_lo, alive=None) -> np.ndarray:
    """The (live) node whose id is numerically closest to each key: Pastry's root."""
    hi, lo = net["node_ids_hi"], net["node_ids_lo"]
    nodes = np.arange(len(hi)) if alive is None else np.flatnonzero(alive)
    order = nodes[pastry_ids.sorted_order(hi[nodes], lo[nodes])]
    return pastry_ids.closest_node(hi[order], lo[order], order,
                                   np.atleast_1d(np.asarray(key_hi, np.uint64)),
                                   np.atleast_1d(np.asarray(key_lo, np.uint64)))


# ---- the world --------------------------------------------------------------------------
class World:
    """One emulation: ``shards`` ShardEngines over ``net`` running ``stack_factory``."""

    def __init__(self, net: dict, stack_factory, shards: int = 1, seed: int = 0):
        self.net = net
        self.n = len(net["node_ids_hi"])
        latency = RouterLatency(net["host_router"], net["router_dist_us"], net["lan_us"])
        # the per-hop message log is the engine's, not a protocol's: off, it only costs here
        self.emu = LocalEmulator(latency, stack_factory, shards=shards, seed=seed,
                                 shared=net, log_messages=False, message_dtype=MSG_DTYPE)
        self._logs: dict[str, list[pa.Table]] = {}

    @property
    def shards(self) -> int:
        return self.emu.shards

    @property
    def now(self) -> int:
        """Every cell before this time (us) has been processed."""
        return self.emu.now

    def run(self, until: int | None = None) -> int:
        """Process every event before ``until`` (all of them when None); returns events."""
        return self.emu.run(PHASE, until)

    def inject(self, requests) -> None:
        """External stimuli: a request batch (``actors.scribe.*_requests``) or records."""
        self.emu.inject(getattr(requests, "msgs", requests))

    def fail(self, nodes, at: int | None = None) -> None:
        """Crash ``nodes`` at ``at`` (default: now, before any later event)."""
        self.emu.fail(np.asarray(nodes, np.int64), self.now if at is None else int(at))

    def recover(self, nodes, at: int | None = None) -> None:
        self.emu.recover(np.asarray(nodes, np.int64), self.now if at is None else int(at))

    def dump(self) -> None:
        """Every stack logs its end-of-phase state (Scribe: tree_edge, ...)."""
        self.emu.call("dump", PHASE)

    # ---- logs and counters ------------------------------------------------------------
    def _collect(self) -> None:
        for engine in self.emu.engines:
            for name, table in engine.take_logs().items():
                self._logs.setdefault(name, []).append(table)

    def table(self, name: str) -> dict[str, np.ndarray]:
        """Every row of event log ``name`` so far, as numpy columns ({} if none)."""
        self._collect()
        parts = self._logs.get(name)
        if not parts:
            return {}
        t = pa.concat_tables(parts, promote_options="permissive")
        return {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}

    def forget(self, name: str) -> None:
        """Drop the rows of log ``name`` seen so far (e.g. before a fresh dump)."""
        self._collect()
        self._logs.pop(name, None)

    @property
    def counters(self) -> dict[str, int]:
        """Protocol counters summed over shards, plus "lost": messages dropped at dead nodes."""
        out: dict[str, int] = {}
        lost = 0
        for engine in self.emu.engines:
            c = engine.counters()
            for k, v in c["counts"].items():
                out[k] = out.get(k, 0) + int(v)
            lost += sum(int(v) for v in c["lost_by_type"].values())
        out["lost"] = lost
        return out

    @property
    def sent(self) -> dict[int, int]:
        """Messages and timers emitted so far by type code, summed over shards (a routed
        message counts once per hop)."""
        out: dict[int, int] = {}
        for engine in self.emu.engines:
            for t, v in engine.counters()["sent_by_type"].items():
                out[int(t)] = out.get(int(t), 0) + int(v)
        return out

    # ---- Pastry state and routes ------------------------------------------------------
    def overlay(self):
        """The global Pastry state (routing tables, leaf sets, neighbourhood sets)."""
        return stack_states(self.emu.call("overlay_state"), self.n)

    def routes(self, start, key_hi, key_lo) -> np.ndarray:
        """Per-hop node matrix (-1 padded) of the route of each (start, key) on the current
        global Pastry state, as the stack's next-hop function routes it."""
        start = np.atleast_1d(np.asarray(start, np.int64))
        kh = np.broadcast_to(np.asarray(key_hi, np.uint64), start.shape).copy()
        kl = np.broadcast_to(np.asarray(key_lo, np.uint64), start.shape).copy()
        _, _, path = route_paths(self.overlay(), self.net["node_ids_hi"],
                                 self.net["node_ids_lo"], start, kh, kl)
        return path

    def route_tree(self, members, key_hi, key_lo) -> set[tuple[int, int]]:
        """(parent, child) edges of the union of the members' routes to the key's root."""
        path = self.routes(members, key_hi, key_lo)
        child, parent = path[:, :-1], path[:, 1:]
        hop = parent >= 0
        return set(zip(parent[hop].tolist(), child[hop].tolist(), strict=True))

    # ---- Scribe -----------------------------------------------------------------------
    def rendezvous(self, n_groups: int) -> np.ndarray:
        """RP of each group as the stacks logged it when the group was created (-1: none)."""
        gt = self.table("group")
        rp = np.full(n_groups, -1, np.int64)
        if gt:
            rp[gt["group"]] = gt["rp"]
        return rp

    def tree_edges(self, group: int) -> set[tuple[int, int]]:
        """(parent, child) edges of ``group``'s tree as the last dump logged them."""
        te = self.table("tree_edge")
        if not te:
            return set()
        sel = te["group"] == group
        return set(zip(te["parent"][sel].tolist(), te["child"][sel].tolist(), strict=True))

    def fresh_tree_edges(self) -> dict[str, np.ndarray]:
        """Dump now and return only this dump's tree_edge rows."""
        self.forget("tree_edge")
        self.dump()
        return self.table("tree_edge")


def scribe_world(net: dict, shards: int = 1, seed: int = 0, pastry: dict | None = None,
                 scribe: dict | None = None) -> World:
    """The product's stack (Pastry with Scribe) over ``net``; Pastry's bootstrap is the
    oracle unless ``pastry`` says otherwise (the trees, not the joins, are under test)."""
    pastry = {"bootstrap": "oracle", **(pastry or {})}
    pp, sp = stack_params(len(net["node_ids_hi"]), seed, pastry, scribe)
    return World(net, lambda: make_stack(pp, sp), shards=shards, seed=seed)


def pastry_world(net: dict, app_factory, shards: int = 1, seed: int = 0,
                 pastry: dict | None = None) -> World:
    """Pastry with a test application (``app_factory()`` per shard; None: no application)
    in the stack object the engine gets in a scenario run."""
    pp, _ = stack_params(len(net["node_ids_hi"]), seed, pastry, None)
    return World(net, lambda: OverlayStack(pp, app_factory() if app_factory else None),
                 shards=shards, seed=seed)


# ---- internal access --------------------------------------------------------------------
# The only functions that reach into a stack's objects. They follow the layout of actors/
# (a stack holds ``.pastry`` and its application ``.app``; Pastry's ``joined`` mask and
# its endpoint's ``replica_set``; Scribe keeps its trees in ``.tree``: find,
# slots["rep_acl"]); a redesign of actors/ adapts them here.
def application(world: World, shard: int):
    """The application object of shard ``shard``'s stack, and that shard's context."""
    engine = world.emu.engines[shard]
    return engine.stack.app, engine.ctx


def shard_of(world: World, node: int) -> int:
    return int(world.emu.node_shard[int(node)])


def _replica_slots(world: World, node: int, group: int):
    app, ctx = application(world, shard_of(world, node))
    slot = int(app.tree.find(ctx.local(np.array([node])), np.array([group]))[0])
    return app.tree.slots, slot


def scribe_replica_acl(world: World, nodes, group: int) -> np.ndarray:
    """The RP record (its credential; -1: none) each of ``nodes`` holds for ``group``."""
    out = []
    for node in np.asarray(nodes, np.int64).tolist():
        slots, slot = _replica_slots(world, node, group)
        out.append(int(slots["rep_acl"][slot]) if slot >= 0 else -1)
    return np.array(out, np.int64)


def scribe_forget_replicas(world: World, nodes, group: int) -> None:
    """Erase the RP records of ``group`` held by ``nodes`` (as if they were replaced)."""
    for node in np.asarray(nodes, np.int64).tolist():
        slots, slot = _replica_slots(world, node, group)
        if slot >= 0:
            slots["rep_acl"][slot] = -1


def scribe_new_leafs(world: World, node: int) -> None:
    """Pastry's upcall to Scribe that ``node``'s leaf set changed."""
    app, ctx = application(world, shard_of(world, node))
    app.new_leafs(ctx, ctx.local(np.array([node])))


def pastry_joined(world: World) -> int:
    """How many nodes Pastry counts as joined (able to route), over all shards."""
    return sum(int(e.stack.pastry.joined.sum()) for e in world.emu.engines)


def replica_set(world: World, node: int, k: int) -> np.ndarray:
    """The k replica holders Pastry names for ``node`` (its closest leaf-set members)."""
    engine = world.emu.engines[shard_of(world, node)]
    return np.asarray(engine.stack.pastry.endpoint.replica_set(engine.ctx, np.array([node]), k))[0]


# ---- checkpoints ------------------------------------------------------------------------
def pending(world: World, type_code: int) -> np.ndarray:
    """The message records of type ``type_code`` waiting in the shards' queues (e.g. the
    JOIN_START timers the protocol bootstrap sets at setup, with their contact in ``a``)."""
    parts = [engine.queue.snapshot().msgs for engine in world.emu.engines]
    m = np.concatenate(parts) if parts else np.zeros(0, MSG_DTYPE)
    return m[m["type"] == type_code]


def checkpoint(world: World) -> bytes:
    """Every shard's state (stack, queue, clocks), pickled as a checkpoint is written.
    Only between phases that ran to the end: nothing may be in flight between shards."""
    assert all(len(e.queue) == 0 for e in world.emu.engines), "events still pending"
    return pickle.dumps([e.state() for e in world.emu.engines])


def restore(world: World, blob: bytes) -> None:
    """Load a :func:`checkpoint` into a freshly built world of the same shape."""
    states = pickle.loads(blob)
    assert len(states) == len(world.emu.engines)
    for engine, st in zip(world.emu.engines, states, strict=True):
        engine.load_state(st)


def protocol_message(src, dst, type_code: int, at, **fields) -> np.ndarray:
    """Hand-made message records, one per ``src`` (scalars broadcast), to pass to
    :meth:`World.inject`: for a test application's stimuli and for fault injection (a
    move the protocol would only make under a rare race)."""
    src = np.atleast_1d(np.asarray(src, np.int64))
    msg = np.zeros(len(src), MSG_DTYPE)
    msg["src"], msg["dst"], msg["type"] = src, dst, type_code
    msg["time"] = msg["sent"] = at
    for name, value in fields.items():
        msg[name] = value
    return msg


def run_without_loop(monkeypatch, run):
    """``run()`` with the stacks' compiled cell loops off from here on (every pass through
    the engine's Python loop and its flush)."""
    monkeypatch.setattr(OverlayStack, "run_cells", property(lambda self: None))
    return run()


def same_outcome(other, ref) -> None:
    """Two runs' outcomes (logs, counters, sends per type, tree states, ...) agree:
    counters, sends per type, every log column (values and types) and every node's tree
    state."""
    logs, counts, sent, trees = other[:4]
    assert counts == ref[1] and sent == ref[2]
    for name, cols in logs.items():
        assert cols.keys() == ref[0][name].keys(), name
        for c, v in cols.items():
            assert np.array_equal(v, ref[0][name][c]), (name, c)
            assert v.dtype == ref[0][name][c].dtype, (name, c)
    for tree, tree_ref in zip(trees, ref[3], strict=True):
        for part in ("slots", "entries"):
            for c, v in tree[part].items():
                assert np.array_equal(v, tree_ref[part][c]), (part, c)
