"""ShardContext: everything a protocol handler may ask of the engine (ARCHITECTURE.md).

Calls are vectorized: ``send`` takes arrays of sources, destinations and fields and makes
one batch. The context is a thin facade over the ShardEngine, so protocol code cannot
reach the queue, the outboxes or other shards.
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .batch import Batch
from .rng import next_draws


class ShardContext:
    def __init__(self, engine):
        self._e = engine
        self.shard_id = engine.shard_id
        self.n_nodes = engine.n_nodes
        self.nodes = engine.nodes
        self.alive = engine.alive
        self.delta_us = engine.delta_us
        self.message_dtype = engine.message_dtype   # the stack's message record
        self._tables = None   # the latency model's arrays, for the compiled arrival times

    @property
    def phase(self) -> str:
        return self._e.phase

    @property
    def now(self) -> int:
        """Start of the cell being processed (us)."""
        return self._e.now

    def local(self, global_ids) -> np.ndarray:
        """Local indices of global node ids (int32; -1 where not on this shard)."""
        if isinstance(global_ids, np.ndarray) and global_ids.ndim == 1 \
                and global_ids.dtype.kind == "i":
            # a record's id column as it is (strided int32): no int64 copy first
            return kernels.local_indices(self._e.local_index, global_ids)
        g = np.asarray(global_ids, np.int64)
        if g.ndim == 1:
            return kernels.local_indices(self._e.local_index, g)
        ok = (g >= 0) & (g < self.n_nodes)
        return np.where(ok, self._e.local_index[np.where(ok, g, 0)], -1).astype(np.int32)

    def send(self, src, dst, type, sent, payload=None, **fields) -> None:
        """Messages from local nodes; each arrives at sent + latency(src, dst)."""
        self._send(src, dst, type, sent, payload, None, fields)

    def send_rows(self, src, dst, type, sent, rows, **fields) -> None:
        """As `send`, message i carrying row i of the int matrix ``rows`` as its payload
        (-1 entries dropped): ``send(..., **batch.pack_rows(rows))`` without the packed
        copy."""
        self._send(src, dst, type, sent, None, rows, fields)

    def _send(self, src, dst, type, sent, payload, rows, fields) -> None:
        src = np.asarray(src)
        n = max(src.size, np.size(dst), np.size(sent))
        if n == 0:
            return
        out = self._e.sends
        m = out.reserve(n)    # zeroed rows, written in place (as `new_messages` would)
        try:
            m["src"] = src
            m["dst"] = dst
            m["type"] = type
            m["sent"] = sent
            for name, value in fields.items():
                m[name] = value
            self._set_arrivals(m)
            if payload is not None:
                out.add_payload(m, payload)
            elif rows is not None:
                if len(rows) != n:
                    raise ValueError(f"send_rows: {len(rows)} payload rows for {n} messages")
                out.add_rows(m, rows)
        except BaseException:
            out.unreserve(n)   # a bad send leaves nothing half-written behind
            raise

    def send_compiled(self, rows: int, ints: int, kernel, *args, zeroed: bool = True):
        """Run a compiled handler that writes its sends in the same call as its work:
        ``kernel(*args, records, pool, cursor, host_router, router_dist_us, lan_us)``, where
        ``records`` are ``rows`` zeroed message records of this pass and ``pool`` has room
        for ``ints`` payload ids from ``cursor`` on. The kernel fills records 0..k-1 in
        sending order (:func:`emulator.kernels.put_send` sets the arrival time of this
        latency model), their payload from ``cursor`` on, and returns its results followed
        by (k, new cursor); those results are returned. If it raises, nothing is sent.
        ``zeroed`` False: the records are not zeroed first (a kernel that zeroes the rows it
        may write itself, when its room is a loose bound)."""
        tables = self._tables
        if not tables:
            if tables is None:
                tables = self._tables = self.latency_tables() \
                    if hasattr(self._e.latency, "host_router") else ()
            if not tables:
                raise TypeError("ctx.send_compiled needs the engine's router latency model")
        sends = self._e.sends
        rows = int(rows)
        m, pool, cursor = sends.room(rows, int(ints), zeroed)
        try:
            res = kernel(*args, m, pool, cursor, *tables)
        except BaseException:
            sends.commit(rows, 0, cursor)
            raise
        sends.commit(rows, res[-2], res[-1])
        return res[:-2]

    def _set_arrivals(self, m) -> None:
        """time = sent + latency(src, dst) for every record of m, in place."""
        lat = self._e.latency
        if self._tables is None:
            self._tables = self.latency_tables() if hasattr(lat, "host_router") else ()
        if self._tables:
            kernels.set_arrivals(m, *self._tables)
        else:   # another latency model (tests): its own vectorized call
            m["time"] = m["sent"] + lat.latency(m["src"], m["dst"])

    def send_batch(self, batch, timed: bool = False) -> None:
        """Like send, for a prepared Batch (or array of message records), copied into the
        pass's sends; `time` is computed here. ``timed``: the caller already set each
        `time` to `sent` + the latency of :meth:`latency_tables`' model (a compiled kernel
        that computed the delay anyway)."""
        msgs, payload = (batch.msgs, batch.payload) if isinstance(batch, Batch) else (batch, None)
        if not len(msgs):
            return
        m = self._e.sends.append(msgs, payload)
        if not timed:
            self._set_arrivals(m)

    def timer(self, node, at, type, **fields) -> None:
        """Self-messages due at `at` (us) at `node`; dropped if the node is dead then."""
        node = np.asarray(node)
        n = max(node.size, np.size(at))
        if n == 0:
            return
        out = self._e.sends
        m = out.reserve(n)
        try:
            m["src"] = node
            m["dst"] = node
            m["type"] = type
            for name, value in fields.items():
                m[name] = value
            m["time"] = at
            m["sent"] = m["time"]
        except BaseException:
            out.unreserve(n)
            raise

    def latency(self, a, b) -> np.ndarray:
        return self._e.latency.latency(a, b)

    def latency_tables(self):
        """(host_router, router_dist_us, lan_us) behind :meth:`latency`, for compiled
        protocol kernels that compute delays themselves: lan + dist[r(a), r(b)] + lan,
        0 for a == b. None when the latency model is not one of router tables."""
        lat = self._e.latency
        if not all(hasattr(lat, a) for a in ("host_router", "router_dist_us", "lan_us")):
            return None
        return lat.host_router, lat.router_dist_us, lat.lan_us

    def random(self, nodes) -> np.ndarray:
        """Uniform [0, 1) per node from its own stream (seed, node, draw number)."""
        nodes = np.ascontiguousarray(nodes, np.int64).ravel()
        li = self.local(nodes)
        if (li < 0).any():
            raise ValueError("ctx.random: nodes must be local to this shard")
        return next_draws(self._e.seed, nodes, li, self._e.draws)

    def rng_state(self):
        """(uint64 seed, draw counters per local node) behind :meth:`random`, for compiled
        handlers that draw inside their own call: draw ``counters[li]`` of node ``g`` is
        ``emulator.rng.node_draw(seed, g, counters[li])``, and the handler advances the
        counter for each number it takes, as :meth:`random` does."""
        return self._e.seed_u64, self._e.draws

    def log(self, table: str, **columns) -> None:
        self._e.logs.add(table, self._e.phase, columns)

    def log_owned(self, table: str, **columns) -> None:
        """As `log`, for arrays the handler just made and never touches again: kept as
        they are, not copied."""
        self._e.logs.add(table, self._e.phase, columns, copy=False)

    def log_records(self, table: str, records: np.ndarray, columns, consts=()) -> None:
        """As `log_owned`, for whole structured records the handler gives away: the log's
        columns are cut from them, ``columns`` ((log column, record field[, dtype]), ...),
        when the buffer merges its chunks (one record array per call instead of a column
        each), followed by the string columns ``consts`` ((log column, value), ...)."""
        self._e.logs.add_records(table, self._e.phase, records, tuple(columns), tuple(consts))

    def count(self, name: str, n=1) -> None:
        c = self._e.counts
        c[name] = c.get(name, 0) + int(n)

    def shared(self, name: str):
        return self._e.shared(name)


__all__ = ["ShardContext"]
