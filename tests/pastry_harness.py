"""A small in-process engine for the Pastry protocol tests (until/besides emulator/).

It follows ARCHITECTURE.md: global cells of width DELTA; per shard the messages due in a
cell are dispatched by type code ascending, each sub-batch sorted by (time, src, seq);
per-sender sequence numbers; CSR payloads; messages to dead nodes are dropped and counted.
"""

from __future__ import annotations

import numpy as np

from actors.pastry.protocol import MSG_DTYPE, make_batch
from actors.pastry.synthetic import host_latency


class Ctx:
    def __init__(self, world, shard_id, nodes):
        self.world, self.shard_id = world, shard_id
        self.nodes = np.asarray(nodes, np.int32)
        self.n_nodes = world.n
        self.alive = np.ones(len(nodes), bool)
        self.phase = "test"
        self.delta_us = world.delta
        self.now = 0

    def local(self, g):
        g = np.asarray(g, np.int64)
        pos = np.searchsorted(self.nodes, g)
        pc = np.minimum(pos, len(self.nodes) - 1)
        return np.where(self.nodes[pc] == g, pc, -1).astype(np.int32)

    def send(self, src, dst, type, sent, payload=None, **fields):
        src = np.atleast_1d(np.asarray(src, np.int64))
        m = np.zeros(len(src), MSG_DTYPE)
        m["src"], m["dst"], m["type"], m["sent"] = src, dst, type, sent
        for k, v in fields.items():
            m[k] = v
        assert (self.local(src) >= 0).all(), "send from another shard's node"
        m["time"] = m["sent"] + self.latency(m["src"], m["dst"])
        self.world.post(m, payload)

    def timer(self, node, at, type, **fields):
        node = np.atleast_1d(np.asarray(node, np.int64))
        m = np.zeros(len(node), MSG_DTYPE)
        m["src"] = m["dst"] = node
        m["type"], m["time"], m["sent"] = type, at, at
        for k, v in fields.items():
            m[k] = v
        self.world.post(m, None)

    def latency(self, a, b):
        return host_latency(self.world.net, a, b)

    def log(self, table, **cols):
        self.world.logs.setdefault(table, []).append({k: np.asarray(v) for k, v in cols.items()})

    def count(self, name, n=1):
        self.world.counters[name] = self.world.counters.get(name, 0) + int(n)

    def shared(self, name):
        return self.world.net[name]


class World:
    def __init__(self, net, stack_factory, shards=1):
        self.net = net
        self.n = len(net["node_ids_hi"])
        self.delta = 2 * int(net["lan_us"])
        self.logs, self.counters = {}, {}
        self.shard_of = np.arange(self.n) % shards
        self.seq = np.zeros(self.n, np.int64)
        self.queue = np.zeros(0, MSG_DTYPE)
        self.payload = np.zeros(0, np.int32)
        self.ctxs = [Ctx(self, k, np.flatnonzero(self.shard_of == k)) for k in range(shards)]
        self.stacks = [stack_factory() for _ in range(shards)]
        for ctx, st in zip(self.ctxs, self.stacks):
            st.setup(ctx)
        self.now = 0

    def post(self, m, payload):
        if not len(m):
            return
        # the real engine would route a message to node -1 nowhere (or crash): catch it here
        assert (m["dst"] >= 0).all() and (m["dst"] < self.n).all(), \
            f"message to a node outside 0..N-1: types {np.unique(m['type'][m['dst'] < 0])}"
        assert (m["time"] >= m["sent"] + self.delta).all() or (m["src"] == m["dst"]).all()
        o = np.argsort(m["src"], kind="stable")
        s = m["src"][o]
        starts = np.r_[0, np.flatnonzero(np.diff(s)) + 1]
        within = np.arange(len(s)) - np.repeat(starts, np.diff(np.r_[starts, len(s)]))
        seq = np.empty(len(m), np.int64)
        seq[o] = self.seq[s] + within
        np.add.at(self.seq, s, 1)
        m["seq"] = seq
        if payload is not None and len(payload):
            m["pay_off"] += len(self.payload)
            self.payload = np.concatenate([self.payload, np.asarray(payload, np.int32)])
        self.queue = np.concatenate([self.queue, m])

    def alive_of(self, nodes):
        out = np.empty(len(nodes), bool)
        for ctx in self.ctxs:
            li = ctx.local(nodes)
            ok = li >= 0
            out[ok] = ctx.alive[li[ok]]
        return out

    def fail(self, nodes):
        for k, ctx in enumerate(self.ctxs):
            li = ctx.local(nodes)
            li = li[li >= 0]
            ctx.alive[li] = False
            self.stacks[k].on_fail(ctx, li)

    def recover(self, nodes):
        for k, ctx in enumerate(self.ctxs):
            li = ctx.local(nodes)
            li = li[li >= 0]
            ctx.alive[li] = True
            ctx.now = self.now
            self.stacks[k].on_recover(ctx, li)

    def run(self, until=None, max_cells=10**6):
        cells = 0
        while len(self.queue):
            t = int(self.queue["time"].min())
            if until is not None and t >= until:
                break
            hi = (t // self.delta + 1) * self.delta
            self.now = t
            due = self.queue["time"] < hi
            cur, self.queue = self.queue[due], self.queue[~due]
            ok = self.alive_of(cur["dst"].astype(np.int64))
            self.counters["lost"] = self.counters.get("lost", 0) + int((~ok).sum())
            cur = cur[ok]
            for k, ctx in enumerate(self.ctxs):
                mine = cur[self.shard_of[cur["dst"]] == k]
                for ty in np.unique(mine["type"]):
                    sub = mine[mine["type"] == ty]
                    sub = sub[np.lexsort((sub["seq"], sub["src"], sub["time"]))]
                    self.stacks[k].handle(ctx, int(ty), make_batch(sub, self.payload))
            cells += 1
            assert cells < max_cells
        if until is not None:
            self.now = until
        return cells
