"""LocalEmulator: K ShardEngines in one process, advanced in global conservative windows.

The Ray driver (:mod:`.driver`) runs each shard in its own actor with per-shard window
bounds; this runs the same ``ShardEngine`` objects in the calling process in one global
window per round (earliest pending event T, global lookahead L, window end
``floor((T + L)/Δ)·Δ``), passing outboxes by hand. Results do not depend on the windows. No
Ray, no files: for protocol tests, determinism digests and microbenchmarks, where starting
actors would cost more than the emulation itself.
"""

from __future__ import annotations

import numpy as np

from .batch import MSG_DTYPE, Batch
from .driver import INJECT_SEQ_BASE, control_messages, round_robin
from .engine import FAIL, RECOVER, ShardEngine
from .queue import NEVER


class LocalEmulator:
    """``shards`` engines over ``latency.n_hosts`` nodes, round robin unless ``node_shard``."""

    def __init__(self, latency, stack_factory, shards: int = 1, node_shard=None, seed: int = 0,
                 shared: dict | None = None, log_messages: bool = True,
                 window_cap_us: int = 200_000):
        n = int(latency.n_hosts)
        if node_shard is None:
            node_shard = round_robin(n, int(shards))
        self.node_shard = np.ascontiguousarray(node_shard, np.int32)
        self.shards = int(self.node_shard.max()) + 1
        self.n_nodes = n
        self.delta_us = int(latency.min_latency_us())
        self.lookahead_us = (int(latency.cross_lookahead_us(self.node_shard))
                             if self.shards > 1 else NEVER)
        self.window_cap_us = max(int(window_cap_us), self.delta_us)
        self.engines = [ShardEngine(k, self.node_shard, latency, stack_factory, seed,
                                    self.delta_us, shared=shared, log_messages=log_messages)
                        for k in range(self.shards)]
        self.now = 0
        self._inject_seq = 0
        self._next = min(e.queue.next_time() for e in self.engines)
        self.windows = 0

    def inject(self, msgs) -> None:
        """External stimuli, numbered as the Ray driver numbers them."""
        m = np.array(msgs, MSG_DTYPE, copy=True)
        if not len(m):
            return
        m["seq"] = INJECT_SEQ_BASE + self._inject_seq + np.arange(len(m))
        self._inject_seq += len(m)
        shard = self.node_shard[m["dst"]]
        for k in np.unique(shard).tolist():
            self.engines[k].accept([Batch(m[shard == k])])
        self._next = min(self._next, int(m["time"].min()))

    def control(self, nodes, at_us: int, code: int) -> None:
        self.inject(control_messages(nodes, at_us, code))

    def fail(self, nodes, at_us: int) -> None:
        self.control(nodes, at_us, FAIL)

    def recover(self, nodes, at_us: int) -> None:
        self.control(nodes, at_us, RECOVER)

    def run(self, phase: str, until: int | None = None) -> int:
        """Process every cell before ``until`` (everything when None); returns events."""
        d = self.delta_us
        limit = NEVER if until is None else -(-int(until) // d) * d
        inbox: list[list[Batch]] = [[] for _ in self.engines]
        events = 0
        while self._next < limit:
            start = self._next - self._next % d
            end = min(((self._next + min(self.lookahead_us, self.window_cap_us)) // d) * d,
                      limit)
            end = max(end, start + d)
            nxt = []
            outs = []
            for k, e in enumerate(self.engines):
                t, out, st = e.advance(end, phase, inbox[k])
                nxt.append(t)
                outs.append(out)
                events += st["events"]
            inbox = [[outs[i][k] for i in range(self.shards) if len(outs[i][k])]
                     for k in range(self.shards)]
            self._next = min(nxt)
            self.now = end
            self.windows += 1
        if until is not None:
            self.now = max(self.now, limit)
        return events

    def call(self, method: str, *args) -> list:
        return [e.call(method, *args) for e in self.engines]
