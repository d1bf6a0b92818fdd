"""A small in-process engine for the Pastry protocol tests (until/besides emulator/).

It follows ARCHITECTURE.md: global cells of width DELTA; per shard the messages due in a
cell are dispatched by type code ascending, each sub-batch sorted by (time, src, seq);
per-sender sequence numbers; CSR payloads; messages to dead nodes are dropped and counted.
"""

from __future__ import annotations

import heapq

import numpy as np

from actors.pastry.messages import MSG_DTYPE, make_batch
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

    def random(self, nodes):
        """Uniform [0, 1) per node from its own stream, as the engine's ctx.random."""
        from emulator.batch import rank_within
        from emulator.rng import node_uniform
        nodes = np.asarray(nodes, np.int64).ravel()
        draws = self.world.draws[nodes] + rank_within(nodes)
        np.add.at(self.world.draws, nodes, 1)
        return node_uniform(0, nodes, draws)

    def log(self, table, **cols):
        self.world.logs.setdefault(table, []).append({k: np.asarray(v) for k, v in cols.items()})

    def count(self, name, n=1):
        self.world.counters[name] = self.world.counters.get(name, 0) + int(n)

    def shared(self, name):
        return self.world.net[name]


VOID = np.dtype((np.void, MSG_DTYPE.itemsize))


class World:
    """Queue: one bucket of message chunks per cell (a heap of cell numbers), payloads in a
    doubling buffer; so posting and popping cost O(messages), not O(queue)."""

    def __init__(self, net, stack_factory, shards=1):
        self.net = net
        self.n = len(net["node_ids_hi"])
        self.delta = 2 * int(net["lan_us"])
        self.logs, self.counters = {}, {}
        self.shard_of = np.arange(self.n) % shards
        self.seq = np.zeros(self.n, np.int64)
        self.draws = np.zeros(self.n, np.int64)
        self.buckets: dict[int, list] = {}
        self.heap: list[int] = []
        self.payload = np.zeros(1 << 16, np.int32)
        self.pay_used = 0
        self.ctxs = [Ctx(self, k, np.flatnonzero(self.shard_of == k)) for k in range(shards)]
        self.stacks = [stack_factory() for _ in range(shards)]
        for ctx, st in zip(self.ctxs, self.stacks):
            st.setup(ctx)
        self.now = 0

    @property
    def queue(self):
        parts = [c for b in self.buckets.values() for c in b]
        return np.concatenate(parts) if parts else np.zeros(0, MSG_DTYPE)

    def post(self, m, payload):
        if not len(m):
            return
        # the real engine would route a message to node -1 nowhere (or crash): catch it here
        assert (m["dst"] >= 0).all() and (m["dst"] < self.n).all(), \
            f"message to a node outside 0..N-1: types {np.unique(m['type'][m['dst'] < 0])}"
        assert (m["time"] >= m["sent"] + self.delta).all() or (m["src"] == m["dst"]).all()
        o = np.argsort(m["src"], kind="stable")
        s = m["src"][o]
        brk = np.flatnonzero(s[1:] != s[:-1]) + 1
        starts = np.concatenate([[0], brk])
        within = np.arange(len(s)) - np.repeat(starts, np.diff(np.concatenate([starts, [len(s)]])))
        seq = np.empty(len(m), np.int64)
        seq[o] = self.seq[s] + within
        np.add.at(self.seq, s, 1)
        m["seq"] = seq
        if payload is not None and len(payload):
            payload = np.asarray(payload, np.int32)
            need = self.pay_used + len(payload)
            if need > len(self.payload):
                self._grow_payload(need)
            m["pay_off"] += self.pay_used
            self.payload[self.pay_used:need] = payload
            self.pay_used = need
        cell = m["time"] // self.delta
        ks = np.unique(cell).tolist()
        for k in ks:
            part = m if len(ks) == 1 else m[cell == k]
            if k not in self.buckets:
                self.buckets[k] = []
                heapq.heappush(self.heap, k)
            self.buckets[k].append(part)

    def _grow_payload(self, need):
        """Double the buffer (payloads are kept for the whole run: a test-sized cost)."""
        buf = np.zeros(max(need, 2 * len(self.payload)), np.int32)
        buf[:self.pay_used] = self.payload[:self.pay_used]
        self.payload = buf

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
        while self.heap:
            k = self.heap[0]
            chunks = self.buckets[k]
            t = min(int(c["time"].min()) for c in chunks)
            if until is not None and t >= until:
                break
            heapq.heappop(self.heap)
            del self.buckets[k]  # self-messages due in this cell open it again: a further pass
            self.now = t
            cur = np.concatenate([c.view(VOID) for c in chunks]).view(MSG_DTYPE) \
                if len(chunks) > 1 else chunks[0]
            ok = self.alive_of(cur["dst"].astype(np.int64))
            self.counters["lost"] = self.counters.get("lost", 0) + int((~ok).sum())
            # one sort for the whole cell (shard, type, time, src, seq), rows moved as opaque
            # records: structured gathers field by field are the slow path of numpy
            idx = np.flatnonzero(ok)
            sh = self.shard_of[cur["dst"][idx]]
            o = idx[np.lexsort((cur["seq"][idx], cur["src"][idx], cur["time"][idx],
                                cur["type"][idx], sh))]
            cur = cur.view(VOID)[o].view(MSG_DTYPE)
            sh, ty = self.shard_of[cur["dst"]], cur["type"]
            brk = np.flatnonzero((sh[1:] != sh[:-1]) | (ty[1:] != ty[:-1])) + 1
            payload = self.payload[:self.pay_used]
            for a, b in zip(np.concatenate([[0], brk]).tolist(),
                            np.concatenate([brk, [len(cur)]]).tolist(), strict=True):
                if a == b:
                    continue
                ctx = self.ctxs[sh[a]]
                ctx.now = k * self.delta
                rows = cur.view(VOID)[a:b].copy().view(MSG_DTYPE)
                self.stacks[sh[a]].handle(ctx, int(ty[a]), make_batch(rows, payload))
            cells += 1
            assert cells < max_cells
        if until is not None:
            self.now = until
        return cells
