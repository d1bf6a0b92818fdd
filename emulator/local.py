"""LocalEmulator: K ShardEngines in one process, advanced in conservative windows.

The same per-shard bounds as the Ray driver (:func:`.driver.window_ends`: shard j may run
to ``min_i (T_i + R[i, j])`` on the grid, R the closure of the lookahead matrix, and only
shards with an event before their bound are advanced), with the same ``ShardEngine``
objects run one after the other in the calling process and their outboxes passed by hand.
Results do not depend on the windows. No Ray, no files: for protocol tests, determinism
digests and microbenchmarks, where starting actors would cost more than the emulation
itself.
"""

from __future__ import annotations

import numpy as np

from .batch import ENGINE_DTYPE, Batch, as_messages
from .driver import INJECT_SEQ_BASE, control_messages, reach_matrix, round_robin, window_ends
from .engine import FAIL, RECOVER, ShardEngine
from .queue import NEVER


class LocalEmulator:
    """``shards`` engines over ``latency.n_hosts`` nodes, round robin unless ``node_shard``."""

    def __init__(self, latency, stack_factory, shards: int = 1, node_shard=None, seed: int = 0,
                 shared: dict | None = None, log_messages: bool = True,
                 window_cap_us: int = 200_000, message_dtype=ENGINE_DTYPE,
                 message_log_fields=()):
        n = int(latency.n_hosts)
        if node_shard is None:
            node_shard = round_robin(n, int(shards))
        self.node_shard = np.ascontiguousarray(node_shard, np.int32)
        self.shards = int(self.node_shard.max()) + 1
        self.n_nodes = n
        self.delta_us = int(latency.min_latency_us())
        # lookahead[i, j]: least latency from shard i to shard j (NEVER on the diagonal)
        self.lookahead = latency.lookahead_matrix_us(self.node_shard)
        self.lookahead_us = int(self.lookahead.min()) if self.shards > 1 else NEVER
        self.reach = reach_matrix(self.lookahead)
        self.window_cap_us = max(int(window_cap_us), self.delta_us)
        self.engines = [ShardEngine(k, self.node_shard, latency, stack_factory, seed,
                                    self.delta_us, shared=shared, log_messages=log_messages,
                                    message_dtype=message_dtype,
                                    message_log_fields=message_log_fields)
                        for k in range(self.shards)]
        self.message_dtype = self.engines[0].message_dtype
        self.now = 0
        self._inject_seq = 0
        # T_i: each shard's earliest pending event, its queue or a batch in its inbox
        self._next_at = np.array([e.queue.next_time() for e in self.engines], np.int64)
        self._inbox: list[list[Batch]] = [[] for _ in self.engines]
        self.windows = 0
        self.shard_calls = 0

    def inject(self, msgs) -> None:
        """External stimuli, numbered as the Ray driver numbers them."""
        if not len(msgs):
            return
        m = as_messages(msgs, self.message_dtype)
        m = m.copy() if m is msgs else m
        m["seq"] = INJECT_SEQ_BASE + self._inject_seq + np.arange(len(m))
        self._inject_seq += len(m)
        shard = self.node_shard[m["dst"]]
        for k in np.unique(shard).tolist():
            part = m[shard == k]
            self.engines[k].accept([Batch(part)])
            self._next_at[k] = min(self._next_at[k], int(part["time"].min()))

    def control(self, nodes, at_us: int, code: int) -> None:
        self.inject(control_messages(nodes, at_us, code, self.message_dtype))

    def fail(self, nodes, at_us: int) -> None:
        self.control(nodes, at_us, FAIL)

    def recover(self, nodes, at_us: int) -> None:
        self.control(nodes, at_us, RECOVER)

    def run(self, phase: str, until: int | None = None) -> int:
        """Process every cell before ``until`` (everything when None); returns events."""
        d = self.delta_us
        limit = NEVER if until is None else -(-int(until) // d) * d
        nxt = self._next_at
        events = 0
        while int(nxt.min()) < limit:
            ends = window_ends(nxt, self.reach, d, self.window_cap_us, limit)
            due = np.flatnonzero(nxt - nxt % d < ends).tolist()
            sent = []
            for k in due:
                e = self.engines[k]
                inbox, self._inbox[k] = self._inbox[k], []
                _, outs, st = e.advance(int(ends[k]), phase, inbox)
                nxt[k] = e.queue.next_time()
                self.now = max(self.now, st["done_until"])   # as the driver's `now`
                events += st["events"]
                sent.append(outs)
            for outs in sent:        # delivered after the window, in shard order
                for j, b in enumerate(outs):
                    if len(b):
                        self._inbox[j].append(b)
                        nxt[j] = min(nxt[j], int(b.msgs["time"].min()))
            self.windows += 1
            self.shard_calls += len(due)
        if until is not None:
            self.now = max(self.now, limit)
        return events

    def call(self, method: str, *args, phase: str | None = None) -> list:
        return [e.call(method, *args, phase=phase) for e in self.engines]
