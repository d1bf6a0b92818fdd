"""Where a scenario run keeps its event logs and checkpoints (README "Running on a Ray
cluster", docs/ARCHITECTURE.md "Event logs").

Three layouts, chosen once per run (`layout_for`) and recorded in state.json so that a
resumed run keeps its layout:

  files under the run directory   one machine, no `run.storage`: the default
  files under `run.storage`       a local path, a shared mount or any pyarrow URI; shards
                                  write Parquet and checkpoints there, the driver its own
                                  tables; the run directory keeps a pointer (STORAGE)
  object store (hand-off)         a multi-node cluster without `run.storage`: shards return
                                  their log tables as Arrow refs the driver owns, RayDP's
                                  JVM reads them into Spark; checkpoints go to the driver

`RunEvents` is the runner's side of it: the driver's own tables (membership, host,
publish, node_event), the shards' flushes, small reads (the group rows), cleaning a phase
that did not complete, and what the analysis reads.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa

from emulator.logs import with_topo
from emulator.storage import Storage, TableRef, ipc_bytes

STORAGE_POINTER = "STORAGE"


@dataclasses.dataclass(frozen=True)
class Layout:
    handoff: bool            # event logs through the object store
    storage: str | None      # the named storage (URI or absolute path), None: none named

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def cluster_nodes() -> int:
    """Live Ray nodes with CPUs (1 on an embedded Ray)."""
    import ray
    return max(1, sum(1 for n in ray.nodes()
                      if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1))


def layout_for(run_cfg: dict, recorded: dict | None = None) -> Layout:
    """The layout of a run: the one recorded at its start (resume), else from `run.storage`,
    `run.event_logs` and the size of the cluster."""
    if recorded:
        return Layout(bool(recorded["handoff"]), recorded.get("storage"))
    storage = run_cfg["storage"] or None
    storage = Storage(storage).uri if storage else None
    mode = run_cfg["event_logs"]
    if mode == "auto":
        handoff = storage is None and cluster_nodes() > 1
    else:
        handoff = mode == "object_store"
    return Layout(handoff, storage)


class RunEvents:
    """A run's event logs in its layout (see the module docstring)."""

    def __init__(self, run_dir: Path, layout: Layout):
        self.run_dir = Path(run_dir)
        self.layout = layout
        self.files = None if layout.handoff else Storage(layout.storage or self.run_dir)
        self._refs: list[TableRef] = []     # hand-off: every table of every flush, in order
        self._names: list[str] = []
        if layout.storage:
            (self.run_dir / STORAGE_POINTER).write_text(layout.storage + "\n")

    # ---- the Emulator's arguments -------------------------------------------------------
    def emulator_options(self) -> dict:
        """storage/handoff for `Emulator`: shards write under the named storage (else the
        run directory), or hand off and keep checkpoints in the named storage or with the
        driver."""
        if self.layout.handoff:
            return {"storage": self.layout.storage, "handoff": True}
        return {"storage": self.files.uri, "handoff": False}

    # ---- writing ------------------------------------------------------------------------
    def write(self, table: str, t: int, phase: str, columns: dict) -> None:
        """Rows the scenario itself logs (membership, host, publish, node_event), as the
        shards' are: Parquet events/<table>/topo=<t>/<phase>-driver.parquet, or a ref."""
        cols = {k: pa.array(v) for k, v in columns.items()}
        n = len(next(iter(cols.values())))
        cols["phase"] = pa.array([phase] * n, pa.string())
        tbl = pa.table(cols)
        if self.files is not None:
            self.files.write_parquet(tbl, table, t, f"{phase}-driver")
            return
        import ray
        tbl = with_topo(tbl, t)
        self.add({table: [TableRef(ray.put(ipc_bytes(tbl)), tbl.schema, n, t, phase)]})

    def add(self, tables: dict[str, list[TableRef]]) -> None:
        """Refs of a flush (hand-off; `Emulator.flush` returns them)."""
        for name, refs in tables.items():
            for r in refs:
                self._refs.append(r)
                self._names.append(name)

    def add_emulator(self, emu) -> None:
        """The refs an Emulator made before its first flush (its message_type table)."""
        if self.layout.handoff:
            self.add({"message_type": emu.logs("message_type")})

    # ---- reading ------------------------------------------------------------------------
    def read(self, table: str, t: int) -> pa.Table | None:
        """Every row of `table` for topology t on the driver (small tables only)."""
        if self.files is not None:
            return self.files.read_events(table, t)
        parts = [r.table() for n, r in zip(self._names, self._refs, strict=True)
                 if n == table and r.topo == t]
        return pa.concat_tables(parts, promote_options="permissive") if parts else None

    def refs(self) -> dict[str, list[TableRef]] | None:
        """{table: [TableRef]} for the analysis (hand-off), else None."""
        if self.files is not None:
            return None
        out: dict[str, list[TableRef]] = {}
        for n, r in zip(self._names, self._refs, strict=True):
            out.setdefault(n, []).append(r)
        return out

    def root(self) -> str:
        """Where the analysis reads Parquet event logs (storage URI or run directory)."""
        return self.files.uri if self.files is not None else str(self.run_dir)

    def rows(self) -> dict[str, int]:
        """Rows per table handed off so far (hand-off runs; {} otherwise)."""
        out: dict[str, int] = {}
        for n, r in zip(self._names, self._refs, strict=True):
            out[n] = out.get(n, 0) + r.rows
        return dict(sorted(out.items()))

    # ---- a phase that did not complete --------------------------------------------------
    def clean_incomplete(self, t: int, done: list[str], phase_of) -> None:
        """Drop topology t's logs from phases not in `done` (a crash between a flush and its
        checkpoint) and the type table the next Emulator writes again."""
        def stale(name: str, phase: str) -> bool:
            return name == "message_type" or phase not in done
        if self.files is None:
            keep = [(n, r) for n, r in zip(self._names, self._refs, strict=True)
                    if r.topo != t or not stale(n, r.phase)]
            self._names = [n for n, _ in keep]
            self._refs = [r for _, r in keep]
            return
        for path in self.files.files("events", suffix=".parquet"):
            parts = path.rsplit("/", 3)
            if len(parts) < 3 or parts[-2] != f"topo={t}":
                continue
            stem = parts[-1][:-len(".parquet")]
            if stale(parts[-3], phase_of(stem)):
                self.files.delete(path)
