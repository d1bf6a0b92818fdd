"""The shard as a Ray actor: a ShardEngine plus peer-to-peer message exchange, event logs
and checkpoints. It knows no protocol: the stack comes from `stack_factory`.

Logs and checkpoints go where the driver says (emulator/storage.py): Parquet files and
checkpoint files under a `Storage` root (the run directory on one machine, or the
`run.storage` the user named), or, for the hand-off on a cluster without shared storage,
Arrow IPC tables returned to the driver as object refs (RayDP's JVM reads them straight
from the object store) and checkpoint state returned to the driver, which keeps it.

No message goes through the driver. At the end of its window a shard pushes each
non-empty outbox straight to the destination shard (`deliver`) and waits for the peers to
take them before it reports to the driver; the driver only learns each shard's next event
time and, per destination, the earliest arrival it sent (to bound the next windows). The
actor runs with ``max_concurrency=2`` so a peer's `deliver` lands while this shard is busy
in `advance`: deliveries only append to a locked inbox, which the next `advance` (or a
checkpoint) takes into the event queue.

Large read-only inputs (the latency tables, node ids, group tables) arrive as object-store
references and are read zero-copy.
"""

from __future__ import annotations

import pickle
import threading
import time

import ray

from .engine import ShardEngine
from .logs import with_topo
from .storage import ipc_bytes

# A shard must accept deliveries while it runs a window: two threads, one for `advance`
# (and the other driver calls, which never overlap it) and one for peers' `deliver`.
SHARD_CONCURRENCY = 2


def _resolve(value):
    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


@ray.remote
class ShardActor:
    def __init__(self, shard_id, node_shard, latency, stack_factory, seed, delta_us, shared,
                 log_messages, storage, topo_index, handoff, message_dtype, message_log_fields):
        self.engine = ShardEngine(shard_id, node_shard, latency, stack_factory, seed, delta_us,
                                  shared=shared, resolve=_resolve, log_messages=log_messages,
                                  message_dtype=message_dtype,
                                  message_log_fields=message_log_fields)
        self.storage = storage          # a Storage, or None: nothing written by the shard
        self.handoff = bool(handoff)    # keep log tables for the driver (object store)
        self.topo_index = int(topo_index)
        self._stash = []
        self._peers: list = []
        self._inbox: list = []
        self._inbox_lock = threading.Lock()

    def ready(self) -> int:
        """The shard's earliest pending event (timers its stack set up), once set up."""
        return self.engine.queue.next_time()

    def connect(self, peers) -> None:
        """The handles of every shard (this one included), indexed by shard id."""
        self._peers = list(peers)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    # ---- message exchange -------------------------------------------------------------
    def deliver(self, *batches) -> None:
        """A peer's outbox for this shard (runs on the second thread, beside `advance`)."""
        with self._inbox_lock:
            self._inbox.extend(batches)

    def _take_inbox(self) -> list:
        with self._inbox_lock:
            inbox, self._inbox = self._inbox, []
        return inbox

    def advance(self, end, phase, *injected):
        """Process every cell before `end`, push outboxes to their shards, and return
        (next local event time, stats); stats["sent_min"] maps each destination shard to
        the earliest arrival time pushed to it in this window."""
        engine = self.engine
        _, outs, stats = engine.advance(end, phase, [*self._take_inbox(), *injected])
        t0 = time.perf_counter()
        acks, sent_min = [], {}
        for k, batch in enumerate(outs):
            if len(batch):
                acks.append(self._peers[k].deliver.remote(batch))
                sent_min[k] = int(batch.msgs["time"].min())
        ray.get(acks)  # the driver must not start the next window before peers hold them
        stats["sent_min"] = sent_min
        stats["push_s"] = time.perf_counter() - t0
        return engine.queue.next_time(), stats

    def accept(self, *injected) -> int:
        """Take the inbox and any injected batches into the queue; the next event time."""
        self.engine.accept([*self._take_inbox(), *injected])
        return self.engine.queue.next_time()

    # ---- stack calls, logs, checkpoints -------------------------------------------------
    def call(self, method, *args, phase=None):
        return self.engine.call(method, *args, phase=phase)

    def flush(self, phase_stem: str) -> list[tuple]:
        """Take the buffered log rows: Parquet under the storage, and for the hand-off the
        tables (with `topo`) kept for `take_tables`. Returns (table, Arrow schema, rows) of
        each non-empty table, sorted by name."""
        tables = self.engine.take_logs()
        names = sorted(tables)
        if self.storage is not None and not self.handoff:
            for name in names:
                self.storage.write_parquet(tables[name], name, self.topo_index,
                                           f"{phase_stem}-shard{self.engine.shard_id}")
        self._stash = []
        out = []
        for name in names:
            tbl = with_topo(tables[name], self.topo_index)
            out.append((name, tbl.schema, tbl.num_rows))
            if self.handoff:
                self._stash.append(ipc_bytes(tbl))
        return out

    def take_tables(self):
        """The tables of the last `flush` as Arrow IPC streams (one return value each, so
        the driver owns them and they outlive this actor)."""
        stash, self._stash = self._stash, []
        return stash[0] if len(stash) == 1 else tuple(stash)

    def counters(self) -> dict:
        return self.engine.counters()

    def peak_rss_bytes(self) -> int:
        """This shard process's peak resident memory (for benchmarks)."""
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def save(self, name: str) -> bytes | None:
        """Checkpoint `name`: the inbox joins the queue first, so nothing in flight is lost.
        Written to the storage's checkpoints/<name>/shard<k>.pkl, or returned (pickled) for
        the driver to keep when the shard has no storage."""
        self.engine.accept(self._take_inbox())
        data = pickle.dumps(self.engine.state(), protocol=5)
        if self.storage is None:
            return data
        self.storage.write_bytes(data, "checkpoints", name, f"shard{self.engine.shard_id}.pkl")
        return None

    def load(self, name: str, data: bytes | None = None) -> int:
        """Restore checkpoint `name` (from the storage, or `data` the driver kept)."""
        if data is None:
            data = self.storage.read_bytes("checkpoints", name,
                                           f"shard{self.engine.shard_id}.pkl")
        self.engine.load_state(pickle.loads(data))
        self._take_inbox()
        return self.engine.queue.next_time()
