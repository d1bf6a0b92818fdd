"""A small in-process stand-in for the engine and Pastry, used by the Scribe tests.

It follows the contracts of docs/ARCHITECTURE.md: a global grid of cells of width
DELTA; per shard, the messages due in a cell are dispatched by type code ascending,
each sub-batch sorted by (time, src, seq); per-sender sequence numbers; messages sent in
a cell arrive in a later cell. The overlay is prefix routing (b = 4) on 64-bit ids with
proximity-selected routing-table entries and a final hop to the numerically closest node
(global knowledge replaces the leaf set) -- deterministic, so the expected Scribe tree is
the union of the routes from the members to the root (``route_path``).
"""

from __future__ import annotations

import numpy as np

from actors.scribe.wire import MSG_DTYPE, msgs_of
from emulator.batch import Batch as make_batch

DELTA = 2000


class _ReplicaMixin:
    def replica_set(self, nodes, k):
        """The k live nodes numerically closest to each node (its leaf set's core)."""
        nodes = np.atleast_1d(np.asarray(nodes, np.int64))
        out = np.full((len(nodes), k), -1, np.int64)
        live = np.flatnonzero(self.alive)
        for i, x in enumerate(nodes):
            d = self.ring_dist(live, x)
            cand = live[np.lexsort((live, *d[::-1]))]
            cand = cand[cand != x][:k]
            out[i, : len(cand)] = cand
        return out


class Overlay(_ReplicaMixin):
    """Routing state shared by all shards (read-only)."""

    def ring_dist(self, nodes, x):
        d = self.ids[nodes] - self.ids[x]
        return (np.minimum(d, -d),)  # ring distance on uint64

    def __init__(self, n: int, seed: int):
        rng = np.random.default_rng(seed)
        self.n = n
        self.ids = rng.integers(0, 2**63, size=n, dtype=np.int64).astype(np.uint64) * 2 + \
            rng.integers(0, 2, size=n).astype(np.uint64)
        self.xy = rng.random((n, 2))
        d = np.sqrt(((self.xy[:, None, :] - self.xy[None, :, :]) ** 2).sum(-1))
        self.lat = (DELTA + (50_000 * d)).astype(np.int64)
        self.order = np.argsort(self.ids)
        self.sorted_ids = self.ids[self.order]
        self.rows = 6
        self.alive = np.ones(n, bool)
        self.rt = self._routing_tables()

    @staticmethod
    def digit(ids, r):
        return ((np.asarray(ids, np.uint64) >> np.uint64(60 - 4 * r)) & np.uint64(15)).astype(np.int64)

    def prefix_len(self, a, b):
        x = np.asarray(a, np.uint64) ^ np.asarray(b, np.uint64)
        out = np.full(x.shape, 16, dtype=np.int64)
        for r in range(15, -1, -1):
            dif = self.digit(x, r) != 0
            out[dif] = r
        return out

    def _routing_tables(self):
        _n, rt = self.n, np.full((self.n, self.rows, 16), -1, dtype=np.int64)
        for r in range(self.rows):
            shift = np.uint64(64 - 4 * (r + 1))
            pre = (self.ids >> shift).astype(np.int64)          # prefix of r+1 digits
            parent_pre = pre >> 4
            for p in np.unique(pre):
                cand = np.flatnonzero(pre == p)
                owners = np.flatnonzero(parent_pre == (p >> 4))
                best = cand[np.argmin(self.lat[np.ix_(owners, cand)], axis=1)]
                rt[owners, r, p & 15] = best
        return rt

    def root(self, key_hi, key_lo=None):
        """The live node numerically closest to each key (64-bit ids: key_lo unused)."""
        key = np.atleast_1d(np.asarray(key_hi, np.uint64))
        order = self.order[self.alive[self.order]]
        ids = self.ids[order]
        pos = np.searchsorted(ids, key)
        a = order[(pos - 1) % len(order)]
        b = order[pos % len(order)]
        da = np.minimum(key - self.ids[a], self.ids[a] - key)
        db = np.minimum(key - self.ids[b], self.ids[b] - key)
        return np.where(db < da, b, np.where(da < db, a, np.minimum(a, b)))

    def next_hop(self, node, key_hi, key_lo=None):
        node = np.asarray(node, np.int64)
        key = np.asarray(key_hi, np.uint64)
        root = self.root(key)
        l = self.prefix_len(self.ids[node], key)
        lc = np.minimum(l, self.rows - 1)
        e = np.where(l < self.rows, self.rt[node, lc, self.digit(key, lc)], -1)
        e = np.where((e < 0) | ~self.alive[np.maximum(e, 0)], root, e)
        return np.where(node == root, -1, e)

    def route_path(self, node, key_hi, key_lo=0):
        path = [int(node)]
        while True:
            nx = int(self.next_hop(np.array([path[-1]]), np.array([key_hi], np.uint64),
                                   np.array([key_lo], np.uint64))[0])
            if nx < 0:
                return path
            path.append(nx)
            assert len(path) < 40, "routing loop"


class OracleOverlay(_ReplicaMixin):
    """The real Pastry pieces: oracle-bootstrapped state (exact PNS) and the vectorized
    next-hop function of actors/pastry, on a synthetic router network."""

    def __init__(self, n: int, seed: int, n_routers: int | None = None):
        from actors.pastry import ids as pids
        from actors.pastry.oracle import oracle_state
        from actors.pastry.routing import next_hop
        from actors.pastry.synthetic import host_latency, synthetic_network

        self.n, self._pids, self._next_hop = n, pids, next_hop
        net = synthetic_network(n, n_routers or max(n // 8, 4), seed)
        self.hi, self.lo = net["node_ids_hi"], net["node_ids_lo"]
        self.ids = self.hi
        self.state = oracle_state(np.arange(n), self.hi, self.lo, net["host_router"],
                                  net["router_dist_us"], net["lan_us"])
        a = np.arange(n)
        self.lat = host_latency(net, a[:, None], a[None, :])
        assert self.lat.min() >= DELTA
        self.alive = np.ones(n, bool)

    def ring_dist(self, nodes, x):
        return self._pids.ring_dist(self.hi[nodes], self.lo[nodes], self.hi[x], self.lo[x])

    def root(self, key_hi, key_lo=None):
        live = np.flatnonzero(self.alive)
        order = live[self._pids.sorted_order(self.hi[live], self.lo[live])]
        return self._pids.closest_node(self.hi[order], self.lo[order], order, key_hi, key_lo)

    def next_hop(self, node, key_hi, key_lo=None):
        node = np.atleast_1d(np.asarray(node, np.int64))
        nxt, _ = self._next_hop(self.state, node, node, np.atleast_1d(key_hi),
                                np.atleast_1d(key_lo), self.hi, self.lo)
        return nxt

    route_path = Overlay.route_path


class Ctx:
    def __init__(self, world, shard_id, nodes):
        self.world, self.shard_id = world, shard_id
        self.nodes = np.asarray(nodes, np.int32)
        self.n_nodes = world.overlay.n
        self.alive = np.ones(len(nodes), bool)
        self.phase = "test"

    def local(self, g):
        g = np.asarray(g, np.int64)
        pos = np.searchsorted(self.nodes, g)
        pos_c = np.minimum(pos, len(self.nodes) - 1)
        return np.where(self.nodes[pos_c] == g, pos_c, -1).astype(np.int32)

    def send(self, src, dst, type, sent, payload=None, **fields):
        src = np.atleast_1d(np.asarray(src, np.int64))
        n = len(src)
        m = np.zeros(n, MSG_DTYPE)
        m["src"], m["dst"], m["type"], m["sent"] = src, dst, type, sent
        for k, v in fields.items():
            m[k] = v
        if payload is not None and len(payload):  # one flat store for the whole world
            m["pay_off"] += self.world.add_payload(payload)
        assert (self.local(src) >= 0).all(), "send from a node of another shard"
        m["time"] = m["sent"] + self.world.overlay.lat[m["src"], m["dst"]]
        self.world.post(m)

    def timer(self, node, at, type, **fields):
        node = np.atleast_1d(np.asarray(node, np.int64))
        m = np.zeros(len(node), MSG_DTYPE)
        m["src"] = m["dst"] = m["origin"] = node
        m["type"], m["time"], m["sent"] = type, at, at
        for k, v in fields.items():
            m[k] = v
        self.world.post(m)

    def latency(self, a, b):
        return self.world.overlay.lat[np.asarray(a), np.asarray(b)]

    def log(self, table, **cols):
        self.world.logs.setdefault(table, []).append({k: np.asarray(v) for k, v in cols.items()})

    def count(self, name, n=1):
        self.world.counters[name] = self.world.counters.get(name, 0) + int(n)

    def shared(self, name):
        return self.world.shared[name]


class HarnessPastry:
    """Pastry stand-in offering the overlay API to the app and the stack API to the engine."""

    def __init__(self, app, overlay):
        self.app, self.ov = app, overlay
        app.bind(self)

    def setup(self, ctx):
        self.app.setup(ctx)

    def send(self, ctx, src, dst, type, sent, **fields):
        fields.setdefault("mode", 0)
        ctx.send(src, dst, type, sent, **fields)

    def route(self, ctx, src, key_hi, key_lo, type, sent, randomize=False, **fields):
        src = np.atleast_1d(np.asarray(src, np.int64))
        n = len(src)
        m = np.zeros(n, MSG_DTYPE)
        m["src"], m["dst"], m["type"], m["time"], m["sent"] = src, src, type, sent, sent
        m["key_hi"], m["key_lo"], m["mode"], m["origin"] = key_hi, key_lo, 1, src
        for k, v in fields.items():
            m[k] = v
        if randomize:  # first hop: a routing-table entry drawn by a per-node counter
            rt = self.ov.rt[src].reshape(n, -1)
            valid = rt >= 0
            draw = ctx.world.draws[src]
            ctx.world.draws[src] += 1
            pick = (src * 7919 + draw * 104729) % np.maximum(valid.sum(axis=1), 1)
            col = np.argmax(np.cumsum(valid, axis=1) > pick[:, None], axis=1)
            first = np.where(valid.any(axis=1), rt[np.arange(n), col], -1)
            jump = first >= 0
            out = m[jump].copy()
            out["dst"] = first[jump]
            out["hops"] = 1
            out["path_us"] = self.ov.lat[out["src"], out["dst"]]
            fields = {k: out[k] for k in MSG_DTYPE.names if k not in ("src", "dst", "type", "sent", "time", "seq")}
            ctx.send(out["src"], out["dst"], out["type"], out["time"], **fields)
            m = m[~jump]
        self._route_step(ctx, m)

    def _route_step(self, ctx, m):
        nxt = self.ov.next_hop(m["dst"], m["key_hi"], m["key_lo"])
        at_root = nxt < 0
        if at_root.any():
            self.app.deliver(ctx, make_batch(m[at_root]))
        rest = m[~at_root]
        if len(rest):
            b, nxt2 = self.app.forward(ctx, make_batch(rest), nxt[~at_root])
            rest = msgs_of(b)
            go = nxt2 >= 0
            out = rest[go].copy()
            out["src"] = out["dst"]
            out["dst"] = nxt2[go]
            out["hops"] += 1
            out["path_us"] += self.ov.lat[out["src"], out["dst"]]
            fields = {k: out[k] for k in MSG_DTYPE.names if k not in ("src", "dst", "type", "sent", "time", "seq")}
            ctx.send(out["src"], out["dst"], out["type"], out["time"], **fields)

    def replica_set(self, ctx, nodes, k):
        return self.ov.replica_set(nodes, k)

    def handle(self, ctx, type_code, batch):
        m = msgs_of(batch)
        routed = m["mode"] == 1
        if routed.any():
            self._route_step(ctx, m[routed].copy())
        if (~routed).any():
            self.app.receive(ctx, make_batch(m[~routed], getattr(batch, "payload", None)))


class World:
    """K shards stepping on the global cell grid."""

    def __init__(self, overlay, app_factory, shards=1, shared=None):
        self.overlay = overlay
        self.logs, self.counters = {}, {}
        self.shared = shared or {}
        n = overlay.n
        self.shard_of = np.arange(n) % shards
        self.seq = np.zeros(n, np.int64)
        self.draws = np.zeros(n, np.int64)
        self._pay = np.zeros(1024, np.int32)
        self._pay_n = 0
        self.queues = [[] for _ in range(shards)]
        self.ctxs, self.stacks = [], []
        for k in range(shards):
            ctx = Ctx(self, k, np.flatnonzero(self.shard_of == k))
            stack = HarnessPastry(app_factory(), overlay)
            stack.setup(ctx)
            self.ctxs.append(ctx)
            self.stacks.append(stack)

    def add_payload(self, flat) -> int:
        """Append a message payload to the world's store; returns its base offset."""
        flat = np.asarray(flat, np.int32)
        base, end = self._pay_n, self._pay_n + len(flat)
        if end > len(self._pay):
            self._pay = np.concatenate([self._pay, np.zeros(max(end, len(self._pay)), np.int32)])
        self._pay[base:end] = flat
        self._pay_n = end
        return base

    def post(self, m, assign_seq=True):
        if not len(m):
            return
        if assign_seq:
            # per-sender sequence numbers in the sender's emission order
            o = np.argsort(m["src"], kind="stable")
            s = m["src"][o]
            starts = np.r_[0, np.flatnonzero(np.diff(s)) + 1]
            runlen = np.diff(np.r_[starts, len(s)])
            within = np.arange(len(s)) - np.repeat(starts, runlen)
            seq = np.empty(len(m), np.int64)
            seq[o] = self.seq[s] + within
            np.add.at(self.seq, s, 1)
            m["seq"] = seq
        for k in range(len(self.queues)):
            part = m[self.shard_of[m["dst"]] == k]
            if len(part):
                self.queues[k].append(part)

    def inject(self, batch):
        self.post(msgs_of(batch).copy(), assign_seq=False)

    def fail(self, nodes):
        self.overlay.alive[np.asarray(nodes)] = False
        for k, ctx in enumerate(self.ctxs):
            li = ctx.local(nodes)
            li = li[li >= 0]
            ctx.alive[li] = False
            self.stacks[k].app.on_fail(ctx, li)

    def run(self, until=None, max_cells=10**7):
        cells = 0
        while True:
            for k in range(len(self.queues)):
                if len(self.queues[k]) > 1:
                    self.queues[k] = [np.concatenate(self.queues[k])]
            pend = [q[0] for q in self.queues if q and len(q[0])]
            if not pend:
                return cells
            t = min(int(p["time"].min()) for p in pend)
            if until is not None and t >= until:
                return cells
            lo = (t // DELTA) * DELTA
            hi = lo + DELTA
            for k, ctx in enumerate(self.ctxs):
                if not self.queues[k]:
                    continue
                q = np.concatenate(self.queues[k])  # includes what other shards just sent
                due = q["time"] < hi
                cur = q[due]
                self.queues[k] = [q[~due]]
                alive = ctx.alive[ctx.local(cur["dst"])]
                self.counters["lost"] = self.counters.get("lost", 0) + int((~alive).sum())
                cur = cur[alive]
                for ty in np.unique(cur["type"]):
                    sub = cur[cur["type"] == ty]
                    sub = sub[np.lexsort((sub["seq"], sub["src"], sub["time"]))]
                    self.stacks[k].handle(ctx, int(ty), make_batch(sub, self._pay[:self._pay_n]))
            cells += 1
            assert cells < max_cells

    def dump(self):
        for k, ctx in enumerate(self.ctxs):
            self.stacks[k].app.dump(ctx, "test")

    def table(self, name):
        parts = self.logs.get(name, [])
        if not parts:
            return {}
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
