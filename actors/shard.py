"""The shard as a Ray actor: a ShardEngine plus log files and checkpoints on disk.

Large read-only inputs (the latency tables, node ids, group tables) arrive as object-store
references and are read zero-copy; messages for other shards leave as separate return
values of ``advance`` so the driver can hand them on as references without fetching them.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import ray

from emulator.engine import ShardEngine
from emulator.logs import with_topo, write_parquet


def _resolve(value):
    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


@ray.remote
class ShardActor:
    def __init__(self, shard_id, node_shard, latency, stack_factory, seed, delta_us, shared,
                 log_messages, run_dir, topo_index):
        self.engine = ShardEngine(shard_id, node_shard, latency, stack_factory, seed, delta_us,
                                  shared=shared, resolve=_resolve, log_messages=log_messages)
        self.run_dir = Path(run_dir) if run_dir else None
        self.topo_index = int(topo_index)
        self._stash = []

    def ready(self) -> int:
        """The shard's earliest pending event (timers its stack set up), once set up."""
        return self.engine.queue.next_time()

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def advance(self, end, phase, *inbound):
        next_time, outs, stats = self.engine.advance(end, phase, inbound)
        stats["out"] = [len(b) for b in outs]
        return [(next_time, stats)] + outs

    def accept(self, *inbound) -> int:
        self.engine.accept(inbound)
        return self.engine.queue.next_time()

    def call(self, method, *args):
        return self.engine.call(method, *args)

    def flush(self, phase_stem: str) -> list[str]:
        """Write buffered log rows as Parquet; stash them for take_tables; return table names."""
        tables = self.engine.take_logs()
        names = sorted(tables)
        if self.run_dir is not None:
            for name in names:
                write_parquet(tables[name], self.run_dir / "events", name, self.topo_index,
                              f"{phase_stem}-shard{self.engine.shard_id}")
        self._stash = [with_topo(tables[n], self.topo_index) for n in names]
        return names

    def take_tables(self):
        stash, self._stash = self._stash, []
        return stash[0] if len(stash) == 1 else tuple(stash)

    def counters(self) -> dict:
        return self.engine.counters()

    def save(self, path: str) -> None:
        with open(path, "wb") as f:
            pickle.dump(self.engine.state(), f, protocol=5)

    def load(self, path: str) -> int:
        with open(path, "rb") as f:
            self.engine.load_state(pickle.load(f))
        return self.engine.queue.next_time()
