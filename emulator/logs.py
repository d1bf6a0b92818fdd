"""Event-log rows: columnar buffers per table, turned into Arrow tables.

Handlers log whole columns at once (``ctx.log("delivery", group=..., member=...)``); a
buffer keeps the column chunks and the phase they were logged in. ``take()`` turns them
into one ``pyarrow.Table`` per table (with a ``phase`` column); `emulator.storage.Storage`
writes it under ``events/<table>/topo=<t>/`` -- the directory carries ``topo`` (hive
partitioning), so the file does not repeat it, while the hand-off's tables get a ``topo``
column (``with_topo``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


class LogBuffer:
    def __init__(self):
        self._chunks: dict[str, list[tuple[str, dict[str, np.ndarray]]]] = {}

    def add(self, table: str, phase: str, columns: dict) -> None:
        """Append rows; array columns must share one length, scalars are broadcast."""
        arrays = {k: np.asarray(v) for k, v in columns.items()}
        lengths = {len(v) for v in arrays.values() if v.ndim == 1}
        if any(v.ndim > 1 for v in arrays.values()) or len(lengths) > 1:
            shapes = {k: v.shape for k, v in arrays.items()}
            raise ValueError(f"log {table!r}: columns must be 1-d of one length, got {shapes}")
        n = lengths.pop() if lengths else 1
        if n == 0:
            return
        cols = {k: (np.full(n, v[()]) if v.ndim == 0 else v.copy()) for k, v in arrays.items()}
        self._chunks.setdefault(table, []).append((phase, cols))

    def take(self) -> dict[str, pa.Table]:
        """All buffered rows as Arrow tables (column order of the first chunk); clears."""
        out = {}
        for table, chunks in sorted(self._chunks.items()):
            parts = []
            for phase, cols in chunks:
                arrays = {k: _arrow(v) for k, v in cols.items()}
                n = len(next(iter(arrays.values())))
                arrays["phase"] = pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(n, np.int32)), pa.array([phase])).cast(pa.string())
                parts.append(pa.table(arrays))
            out[table] = pa.concat_tables(parts, promote_options="permissive")
        self._chunks = {}
        return out


def _arrow(v: np.ndarray) -> pa.Array:
    if v.dtype == object or v.dtype.kind in "US":
        return pa.array(v.astype(str).tolist() if v.dtype.kind != "O" else list(v), pa.string())
    return pa.array(v)


def with_topo(table: pa.Table, topo: int) -> pa.Table:
    return table.append_column("topo", pa.array(np.full(table.num_rows, int(topo), np.int32)))
