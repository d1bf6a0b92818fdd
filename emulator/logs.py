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
    """Column chunks per table, as handlers logged them, merged as they pile up.

    A handler call logs a few rows; a sparse run (nodes arriving one by one over hours of
    virtual time) makes tens of millions of such calls, and a chunk's fixed cost (a dict,
    one array object per column, and at `take` one Arrow table) then outweighs its rows:
    a 100,000-node bootstrap's logs grew to 19 GB in one shard. So every `MERGE_EVERY`
    chunks of a table, the new ones are merged into as few chunks as their layouts allow
    (consecutive chunks of one phase with the same columns and dtypes): O(rows) copies
    once each, and the rows, their order and their types are unchanged.

    They are merged as well once they hold `MERGE_BYTES`: the compiled loop logs a
    window's hops as one chunk of whole message records, 3-4x the bytes of the columns
    cut out of them, and a dense phase's few windows (a million nodes joining their
    groups) would otherwise keep gigabytes of records until `take`.
    """

    MERGE_EVERY = 256
    MERGE_BYTES = 16 << 20

    def __init__(self):
        self._chunks: dict[str, list[tuple[str, dict[str, np.ndarray]]]] = {}
        self._merged: dict[str, int] = {}     # chunks of each table up to here are merged
        self._unmerged_bytes: dict[str, int] = {}   # held by the chunks after them

    def add(self, table: str, phase: str, columns: dict, copy: bool = True) -> None:
        """Append rows; array columns must share one length, scalars are broadcast (a
        string is kept as one value and a row count, :class:`_Const`, until `take`).
        ``copy=False``: the arrays are the caller's to give away (nothing writes them
        later), so they are kept as they are."""
        # one pass over the columns (a handler logs a few rows per call: this check is
        # most of the call), a second only where strings or scalars must be broadcast
        cols, n, broadcast, bad = {}, -1, False, False
        for k, v in columns.items():
            if isinstance(v, str):
                broadcast = True
            else:
                if not isinstance(v, np.ndarray):
                    v = np.asarray(v)
                if v.ndim == 1:
                    if n < 0:
                        n = len(v)
                    elif len(v) != n:
                        bad = True
                elif v.ndim:
                    bad = True
                else:
                    broadcast = True
            cols[k] = v
        if bad:
            shapes = {k: np.shape(v) for k, v in cols.items()}
            raise ValueError(f"log {table!r}: columns must be 1-d of one length, got {shapes}")
        if n < 0:
            n = 1
        if n == 0:
            return
        if broadcast or copy:
            cols = {k: (_Const(v, n) if isinstance(v, str) else np.full(n, v[()]) if v.ndim == 0
                        else (v.copy() if copy else v))
                    for k, v in cols.items()}
        self._append(table, (phase, cols),
                     sum(v.nbytes for v in cols.values() if isinstance(v, np.ndarray)))

    def add_records(self, table: str, phase: str, records: np.ndarray,
                    columns: tuple[tuple, ...], consts: tuple[tuple[str, str], ...] = ()):
        """Append whole structured records (the caller's to give away), logged as the
        columns ``(name, record field)`` or ``(name, record field, dtype)`` (the column
        cast to that type), then the string columns ``consts`` ``(name, value)``, one value
        for every row: the engine logs every hop it sends this way, and the columns are
        cut out of a few hundred chunks at once when they are merged (cheaper than per
        chunk, and the buffer then holds columns, not whole records)."""
        if not len(records):
            return
        self._append(table, (phase, _Records(records, columns, consts)), records.nbytes)

    def _append(self, table: str, chunk: tuple, nbytes: int) -> None:
        """Append ``chunk`` (``nbytes`` of arrays) to ``table``; the chunks not merged yet
        are merged once there are `MERGE_EVERY` of them or they hold `MERGE_BYTES`."""
        chunks = self._chunks.setdefault(table, [])
        chunks.append(chunk)
        held = self._unmerged_bytes.get(table, 0) + nbytes
        done = self._merged.get(table, 0)
        if len(chunks) - done >= self.MERGE_EVERY or held >= self.MERGE_BYTES:
            chunks[done:] = _merge_runs(chunks[done:])
            self._merged[table] = len(chunks)
            held = 0
        self._unmerged_bytes[table] = held

    def take(self) -> dict[str, pa.Table]:
        """All buffered rows as Arrow tables (column order of the first chunk, one chunk
        per merged run of chunks); clears."""
        out = {}
        for table, chunks in sorted(self._chunks.items()):
            parts = []
            # the chunks merged so far stay apart (the table's columns are chunked, no row
            # copied again: a sparse phase's hop log is hundreds of megabytes); the rest are
            # merged
            done = self._merged.get(table, 0)
            for phase, cols in chunks[:done] + _merge_runs(chunks[done:]):
                arrays = {k: _arrow(v) for k, v in cols.items()}
                arrays["phase"] = constant_strings(phase, len(next(iter(arrays.values()))))
                parts.append(pa.table(arrays))
            out[table] = pa.concat_tables(parts, promote_options="permissive")
        self._chunks = {}
        self._merged = {}
        self._unmerged_bytes = {}
        return out


class _Records:
    """A chunk of whole records, the columns to cut out of them ((name, field) or (name,
    field, dtype)) and the constant string columns after them ((name, value))."""

    __slots__ = ("rows", "columns", "consts")

    def __init__(self, rows: np.ndarray, columns: tuple[tuple, ...],
                 consts: tuple[tuple[str, str], ...] = ()):
        self.rows, self.columns, self.consts = rows, columns, consts

    def cut(self) -> dict:
        rows = self.rows
        cols = {c[0]: np.ascontiguousarray(rows[c[1]], *c[2:]) for c in self.columns}
        for name, value in self.consts:
            cols[name] = _Const(value, len(rows))
        return cols


class _Const:
    """A string column whose rows all hold one value (a label, such as a delivery's
    variant): the value and the row count, not one Python object per row."""

    __slots__ = ("value", "n")

    def __init__(self, value: str, n: int):
        self.value, self.n = value, n

    def __len__(self) -> int:
        return self.n

    def rows(self) -> np.ndarray:
        return np.full(self.n, self.value, dtype=object)


def _concat(parts) -> np.ndarray | _Const:
    """One column from a run's chunks of it, a constant while every chunk holds the same."""
    if isinstance(parts[0], _Const):
        if all(isinstance(p, _Const) and p.value == parts[0].value for p in parts):
            return _Const(parts[0].value, sum(p.n for p in parts))
        return np.concatenate([p.rows() if isinstance(p, _Const) else p for p in parts])
    return np.concatenate(parts)


def _layout(chunk) -> tuple:
    phase, cols = chunk
    if isinstance(cols, _Records):
        return phase, "records", cols.rows.dtype, cols.columns, cols.consts
    return phase, tuple((k, _Const if isinstance(v, _Const) else v.dtype)
                        for k, v in cols.items())


def _merge_runs(chunks: list) -> list:
    """Consecutive chunks of one layout (phase, column names in order, dtypes) as one
    chunk each, record chunks cut into columns; O(rows of the merged chunks)."""
    out, run = [], []

    def close():
        if run and isinstance(run[0][1], _Records):
            phase, first = run[0]
            out.append((phase, _cut_records([r.rows for _, r in run], first)))
        elif len(run) == 1:
            out.append(run[0])
        elif run:
            phase, first = run[0]
            out.append((phase, {k: _concat([c[k] for _, c in run]) for k in first}))

    key = None
    for chunk in chunks:
        k = _layout(chunk)
        if k != key:
            close()
            run, key = [], k
        run.append(chunk)
    close()
    return out


CUT_BLOCK_BYTES = 1 << 20


def _cut_records(rows: list, first: _Records) -> dict:
    """The columns of record chunks ``rows`` (the dtype, columns and consts of ``first``),
    cut out of about ``CUT_BLOCK_BYTES`` of records at a time, then joined: cutting a
    column strides over every record, so records past the caches' size would be read from
    memory once per column (and a merge's records can be hundreds of megabytes, a fresh
    allocation each time). O(rows)."""
    row = np.dtype((np.void, first.rows.dtype.itemsize))
    per_block = max(1, CUT_BLOCK_BYTES // first.rows.dtype.itemsize)
    # a chunk larger than a block (a window's hops) is cut a block at a time too
    rows = [r[k:k + per_block] for r in rows for k in range(0, len(r), per_block)]
    parts: dict[str, list] = {}
    i = 0
    while i < len(rows):
        j, size = i + 1, rows[i].nbytes
        while j < len(rows) and size + rows[j].nbytes <= CUT_BLOCK_BYTES:
            size += rows[j].nbytes
            j += 1
        block = rows[i] if j == i + 1 else \
            np.concatenate([r.view(row) for r in rows[i:j]]).view(first.rows.dtype)
        for name, col in _Records(block, first.columns, first.consts).cut().items():
            parts.setdefault(name, []).append(col)
        i = j
    return {name: cols[0] if len(cols) == 1 else _concat(cols) for name, cols in parts.items()}


# the bytes of one string array (its offsets are int32)
MAX_STRING_BYTES = 2**31 - 1


def constant_strings(value: str, n: int) -> pa.Array | pa.ChunkedArray:
    """A string column of ``n`` rows that all hold ``value``, built from its two buffers
    (offsets ``i * len``, the value's bytes repeated): no per-row object, and no gather
    of a dictionary's indices (a phase column of millions of rows is written at every
    flush). Chunked where one array's bytes would pass MAX_STRING_BYTES. O(n)."""
    data = value.encode()
    per = n if not data else max(1, MAX_STRING_BYTES // len(data))
    parts = []
    for start in range(0, max(n, 1), per):
        k = min(per, n - start)
        offsets = np.arange(k + 1, dtype=np.int32) * np.int32(len(data))
        parts.append(pa.StringArray.from_buffers(k, pa.py_buffer(offsets),
                                                 pa.py_buffer(data * k)))
    return parts[0] if len(parts) == 1 else pa.chunked_array(parts, pa.string())


def _arrow(v) -> pa.Array | pa.ChunkedArray:
    if isinstance(v, _Const):
        return constant_strings(v.value, v.n)
    if v.dtype == object or v.dtype.kind in "US":
        return pa.array(v.astype(str).tolist() if v.dtype.kind != "O" else list(v), pa.string())
    return pa.array(v)


TOPO_FIELD = pa.field("topo", pa.int32())   # the topology seed index of every event table


def with_topo(table: pa.Table, topo: int) -> pa.Table:
    return table.append_column(TOPO_FIELD,
                               pa.array(np.full(table.num_rows, int(topo), np.int32)))
