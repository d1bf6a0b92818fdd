"""The event-log buffer (emulator/logs.py): merging the small chunks that sparse runs log
changes no row, order or type, and keeps the number of chunks bounded."""

import numpy as np
import pyarrow as pa
import pytest

from emulator import logs
from emulator.logs import LogBuffer, _arrow

# the records' columns cut a block at a time: one block, and blocks of one to a few chunks
CUT_BLOCKS = pytest.mark.parametrize("block_bytes", [logs.CUT_BLOCK_BYTES, 64])


def _one_table_per_chunk(chunks) -> pa.Table:
    """What `take` made before chunks were merged: one Arrow table per logged chunk."""
    parts = []
    for phase, cols in chunks:
        arrays = {k: _arrow(v) for k, v in cols.items()}
        n = len(next(iter(arrays.values())))
        arrays["phase"] = pa.array([phase] * n, pa.string())
        parts.append(pa.table(arrays))
    return pa.concat_tables(parts, promote_options="permissive")


def _random_records(rng, dtype, most: int, high: int) -> np.ndarray:
    """0..most-1 records of ``dtype``, every field drawn from 0..high-1."""
    r = np.zeros(int(rng.integers(0, most)), dtype)
    for name in dtype.names:
        r[name] = rng.integers(0, high, len(r))
    return r


def test_merged_chunks_give_the_same_table_and_stay_few():
    rng = np.random.default_rng(7)
    merged = LogBuffer()
    merged.MERGE_EVERY = 16
    logged = []
    for i in range(4000):
        n = int(rng.integers(0, 12))
        phase = "bootstrap" if i < 2500 else "join"
        cols = {"time": rng.integers(0, 10**9, n), "src": rng.integers(0, 99, n).astype(np.int32)}
        if i % 333 == 0:            # now and then a chunk with another layout
            cols["group"] = np.full(n, i, np.int16)
        if i % 501 == 0:
            cols["src"] = cols["src"].astype(np.int64)
        merged.add("message", phase, cols)
        if n:
            logged.append((phase, {k: v.copy() for k, v in cols.items()}))
    # merged as it goes: every 16 chunks become one, or a few where the layout changes
    assert len(merged._chunks["message"]) < len(logged) / 8
    table = merged.take()["message"]
    expected = _one_table_per_chunk(logged)
    assert table.num_rows == sum(len(c["time"]) for _, c in logged) > 0
    assert table.schema.equals(expected.schema)
    assert table.equals(expected)
    assert merged.take() == {}


def test_a_logged_array_changed_later_does_not_change_the_log():
    buf = LogBuffer()
    col = np.arange(5)
    buf.add("route", "join", {"hops": col, "root": 3})
    col[:] = -1
    t = buf.take()["route"]
    assert t.column("hops").to_pylist() == [0, 1, 2, 3, 4]
    assert t.column("root").to_pylist() == [3] * 5


@CUT_BLOCKS
def test_records_logged_whole_give_the_columns_cut_from_them(block_bytes, monkeypatch):
    """Whole records (the engine's sent messages) give, merged or not, the table of their
    fields logged as columns, renamed as asked; the buffer keeps columns once merged."""
    monkeypatch.setattr(logs, "CUT_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(3)
    rec = np.dtype([("time", "i8"), ("sent", "i8"), ("src", "i4"), ("type", "i2"),
                    ("group", "i4")])
    columns = (("time", "sent"), ("arrival", "time"), ("src", "src"), ("type", "type"),
               ("group", "group"))
    whole, as_columns = LogBuffer(), LogBuffer()
    whole.MERGE_EVERY = 8
    for i in range(100):
        r = _random_records(rng, rec, 9, 1000)
        phase = "join" if i < 60 else "multicast"
        as_columns.add("message", phase, {c: r[f].copy() for c, f in columns})
        whole.add_records("message", phase, r, columns)
    assert len(whole._chunks["message"]) < 30
    assert all(isinstance(cols, dict) for _, cols in whole._chunks["message"][:8])
    got, want = whole.take()["message"], as_columns.take()["message"]
    assert got.column_names == ["time", "arrival", "src", "type", "group", "phase"]
    assert got.equals(want)


@CUT_BLOCKS
def test_records_past_the_byte_bound_are_cut_at_once_into_the_same_table(block_bytes,
                                                                         monkeypatch):
    """A window's hops logged as one large chunk of records (the compiled loop's) are cut
    into columns as soon as the table's unmerged chunks hold MERGE_BYTES, not kept whole
    until `take`, and the table is the same as that of the columns logged as they came."""
    monkeypatch.setattr(logs, "CUT_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(8)
    rec = np.dtype([("time", "i8"), ("sent", "i8"), ("src", "i4"), ("pad", "V60")])
    columns = (("time", "sent"), ("arrival", "time"), ("src", "src"))
    bounded, as_columns = LogBuffer(), LogBuffer()
    bounded.MERGE_BYTES = 50_000 * rec.itemsize
    held = []
    for n in (70_000, 10, 20_000, 20_000, 20_000, 3):
        r = np.zeros(n, rec)
        for name in ("time", "sent", "src"):
            r[name] = rng.integers(0, 10**6, n)
        as_columns.add("message", "join", {c: r[f].copy() for c, f in columns})
        bounded.add_records("message", "join", r, columns)
        held.append(sum(c.rows.nbytes for _, c in bounded._chunks["message"]
                        if isinstance(c, logs._Records)))
    # the first chunk alone is past the bound: cut at once; then 3 chunks pile up to it
    assert held == [0, 10 * rec.itemsize, 20_010 * rec.itemsize, 40_010 * rec.itemsize, 0,
                    3 * rec.itemsize]
    got, want = bounded.take()["message"], as_columns.take()["message"]
    assert got.equals(want)


@CUT_BLOCKS
def test_records_with_a_cast_column_and_a_label_give_the_columns_logged_one_by_one(
        block_bytes, monkeypatch):
    """Records logged with a column cast on the way and a string label (Scribe's compiled
    delivery rows), interleaved with the same columns logged one by one (its general
    path), give the table of the columns logged one by one, types included."""
    monkeypatch.setattr(logs, "CUT_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(5)
    rec = np.dtype([("time", "i8"), ("dst", "i4"), ("c", "i8")])
    columns = (("member", "dst"), ("time", "time"), ("hops", "c", np.int16))
    mixed, one_by_one = LogBuffer(), LogBuffer()
    mixed.MERGE_EVERY = 8
    for i in range(120):
        r = _random_records(rng, rec, 7, 30_000)
        variant = "scribe" if i < 90 else "collapsed"
        cols = {"member": r["dst"].copy(), "time": r["time"].copy(),
                "hops": r["c"].astype(np.int16), "variant": variant}
        one_by_one.add("delivery", "multicast", cols)
        if i % 5 == 0:
            mixed.add("delivery", "multicast", dict(cols))
        else:
            mixed.add_records("delivery", "multicast", r, columns, (("variant", variant),))
    got, want = mixed.take()["delivery"], one_by_one.take()["delivery"]
    assert got.column_names == ["member", "time", "hops", "variant", "phase"]
    assert got.schema.equals(want.schema) and got.column("hops").type == pa.int16()
    assert got.equals(want)


def test_a_string_label_is_kept_once_and_gives_the_rows_of_an_object_column():
    """A string logged as a scalar (a delivery's variant) is one value and a row count in
    the buffer, merged across chunks while the value stays, and gives the same table as
    the object column of one Python string per row that handlers logged before."""
    rng = np.random.default_rng(11)
    labels, objects = LogBuffer(), LogBuffer()
    labels.MERGE_EVERY = 8
    for i in range(200):
        n = int(rng.integers(0, 6))
        variant = "scribe" if i < 120 else ("collapse" if i % 7 else "scribe")
        member = rng.integers(0, 99, n).astype(np.int32)
        labels.add("delivery", "multicast", {"member": member, "variant": variant})
        objects.add("delivery", "multicast",
                    {"member": member, "variant": np.full(n, variant, dtype=object)})
    # the first chunks' labels merged (8 at a time here) into a constant, not an object
    # array (a chunk holds at most 5 rows)
    first = labels._chunks["delivery"][0][1]["variant"]
    assert not isinstance(first, np.ndarray) and len(first) > 5
    got, want = labels.take()["delivery"], objects.take()["delivery"]
    assert got.schema.equals(want.schema) and got.column("variant").type == pa.string()
    assert got.equals(want)


@pytest.mark.parametrize("max_bytes", [logs.MAX_STRING_BYTES, 20],
                         ids=["one_array", "chunked"])
def test_a_constant_string_column_holds_its_value_in_every_row(max_bytes, monkeypatch):
    """The phase column and a label's rows, built from their buffers: the strings a
    per-row column would hold (multi-byte and empty values too), in chunks where one
    array's bytes would overflow its int32 offsets (here: a limit of 20 bytes)."""
    monkeypatch.setattr(logs, "MAX_STRING_BYTES", max_bytes)
    for value, n in (("bootstrap", 11), ("é-multicast", 7), ("", 4), ("join", 0)):
        col = logs.constant_strings(value, n)
        assert col.type == pa.string() and col.to_pylist() == [value] * n
        assert pa.chunked_array([col] if isinstance(col, pa.Array) else col.chunks).equals(
            pa.chunked_array([pa.array([value] * n, pa.string())]))
    chunked = logs.constant_strings("bootstrap", 11)
    assert isinstance(chunked, pa.ChunkedArray) == (max_bytes == 20)
    buf = LogBuffer()
    buf.add("hop", "bootstrap", {"src": np.arange(11, dtype=np.int32)})
    table = buf.take()["hop"]
    assert table.column("phase").to_pylist() == ["bootstrap"] * 11


def test_columns_of_different_lengths_or_shapes_are_refused_and_scalars_broadcast():
    import pytest

    lb = LogBuffer()
    for bad in ({"a": np.arange(3), "b": np.arange(4)},
                {"a": np.arange(3), "b": np.arange(4), "c": np.arange(3)},
                {"a": np.zeros((2, 2))}):
        with pytest.raises(ValueError, match="1-d of one length"):
            lb.add("t", "p", bad)
    lb.add("t", "p", {"a": np.arange(3), "k": 7, "label": "x"})
    lb.add("t", "p", {"a": [], "k": 1})          # no rows: nothing logged
    lb.add("u", "p", {"k": 5})                   # scalars alone: one row
    out = lb.take()
    assert out["t"].column("a").to_pylist() == [0, 1, 2]
    assert out["t"].column("k").to_pylist() == [7, 7, 7]
    assert out["t"].column("label").to_pylist() == ["x"] * 3
    assert out["u"].column("k").to_pylist() == [5]
