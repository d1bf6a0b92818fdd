"""The engine on its own, with the flooding test protocol (tests/emu_protocols.py)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from emu_protocols import BOOM, FLOOD_DTYPE, PING, RELAY, TYPE_NAMES, Flood
from emulator import ENGINE_DTYPE, Batch, RouterLatency, message_dtype, new_messages, rank_within
from emulator.batch import SparseBatch, as_messages, pack_rows, take_rows
from emulator.engine import ShardEngine
from emulator.queue import NEVER, RING_CELLS, EventQueue
from emulator.rng import node_uniform
from topologies import make_topology
from topologies.partition import partition_routers


@pytest.fixture(scope="module")
def topo():
    return make_topology("ts600", 1, 1500)


@pytest.fixture(scope="module")
def lat(topo):
    return RouterLatency.from_topology(topo)


# ---- pure parts --------------------------------------------------------------------------
def test_batch_take_and_concat_keep_payload_rows():
    m = new_messages(3, src=[0, 1, 2], dst=[1, 2, 0], pay_off=[0, 2, 2], pay_len=[2, 0, 3])
    b = Batch(m, np.array([10, 11, 20, 21, 22], np.int32))
    t = b.take(np.array([2, 0]))
    assert t.segment(0).tolist() == [20, 21, 22] and t.segment(1).tolist() == [10, 11]
    assert len(t.payload) == 5
    c = Batch.concat([t, b.take(np.array([0])), Batch(new_messages(1))])
    assert [c.segment(i).tolist() for i in range(4)] == [[20, 21, 22], [10, 11], [10, 11], []]


def test_send_buffer_equals_the_sends_concatenated():
    """A pass's sends written into one SendBuffer come out as the same rows, in the same
    order, with the same payload segments as the sends made one by one and concatenated,
    across growth of both pools, payload given as slices of a larger payload, and a send
    that fails half-way (which leaves nothing behind)."""
    from emulator.sendbuf import SendBuffer

    rng = np.random.default_rng(3)
    buf, sends = SendBuffer(ENGINE_DTYPE), []
    for i in range(400):
        n = int(rng.integers(1, 9))
        lens = rng.integers(0, 40, n) if i % 3 else np.zeros(n, np.int64)
        big = rng.integers(0, 10**6, int(lens.sum()) + 50).astype(np.int32)
        offs = rng.integers(0, 50, n)       # segments anywhere in a larger payload
        m = new_messages(n, ENGINE_DTYPE, src=rng.integers(0, 100, n), dst=i, type=i % 7,
                         pay_off=offs, pay_len=lens)
        b = Batch(m, big if lens.any() else None)
        sends.append(b)
        if i % 2:
            buf.append(b.msgs, b.payload)
        else:
            view = buf.reserve(n)
            for name in ("src", "dst", "type", "pay_off", "pay_len"):
                view[name] = m[name]
            if lens.any():
                buf.add_payload(view, big)
        if i == 7:   # a segment outside its payload: an error, and nothing half-written
            before = len(buf)
            bad = new_messages(2, ENGINE_DTYPE, pay_off=[0, 45], pay_len=[1, 9])
            with pytest.raises(ValueError, match="outside its payload"):
                buf.append(bad, np.zeros(50, np.int32))
            assert len(buf) == before
    got = buf.take()
    want = Batch.concat(sends, ENGINE_DTYPE)
    assert len(buf) == 0 and len(got) == len(want) > 256
    for f in ("src", "dst", "type", "pay_len"):
        assert np.array_equal(got.msgs[f], want.msgs[f])
    assert all(np.array_equal(got.segment(i), want.segment(i)) for i in range(len(got)))
    assert len(got.payload) == int(want.msgs["pay_len"].sum()) > 4096


def test_send_buffer_rows_equal_packed_payload():
    """Id rows packed straight into the pool (`add_rows`, behind ``ctx.send_rows``) give
    the records, offsets included, and the pool that ``pack_rows`` then `add_payload`
    give: rows with no entry, all-empty sends, wide rows that grow the pool."""
    from emulator.sendbuf import SendBuffer

    rng = np.random.default_rng(4)
    a, b = SendBuffer(ENGINE_DTYPE), SendBuffer(ENGINE_DTYPE)
    for i in range(300):
        n = int(rng.integers(1, 6))
        ids = rng.integers(-1, 10**6, (n, int(rng.integers(1, 60))))
        ids[rng.random(ids.shape) < 0.4] = -1
        if i % 4 == 0:
            ids[:] = -1                       # a send without any payload entry
        packed = pack_rows(ids)
        va = a.reserve(n)
        va["dst"] = i
        va["pay_off"], va["pay_len"] = packed["pay_off"], packed["pay_len"]
        a.add_payload(va, packed["payload"])
        vb = b.reserve(n)
        vb["dst"] = i
        b.add_rows(vb, ids if i % 2 else ids.astype(np.int32).T.copy().T)
    ga, gb = a.take(), b.take()
    assert np.array_equal(ga.msgs, gb.msgs) and np.array_equal(ga.payload, gb.payload)
    assert len(gb.payload) > 4096 and (gb.msgs["pay_len"] == 0).any()


def test_compiled_sends_equal_ctx_sends_and_a_failed_kernel_sends_nothing(lat):
    """``ctx.send_compiled``: records written with ``kernels.put_send`` and a payload
    written into the lent pool equal the same messages sent by ``ctx.send_rows`` (arrival
    times of the engine's model, offsets included); rows lent but not written are not
    sent; a kernel that raises, or returns a bad count, leaves nothing behind."""
    from emulator.kernels import put_send

    def engine():
        e = ShardEngine(0, np.zeros(lat.n_hosts, np.int32), lat, Flood, seed=1,
                        delta_us=lat.min_latency_us(), message_dtype=FLOOD_DTYPE)
        e.sends.take()
        return e

    src = np.array([3, 5, 5, 0], np.int64)
    dst = np.array([7, 5, 1, 9], np.int64)     # (5 -> 5: a self-message, no delay)
    ids = np.array([[4, -1, 6], [-1, -1, -1], [8, 9, 10], [11, -1, -1]], np.int64)
    a = engine()
    a.ctx.send_rows(src, dst, PING, 1000 + src, ids)

    def kernel(s, d, rows, out, pool, cursor, hr, rdist, lan):
        for i in range(len(s)):
            put_send(out, i, s[i], d[i], PING, 1000 + s[i], hr, rdist, lan)
            out[i]["pay_off"] = cursor
            for v in rows[i]:
                if v >= 0:
                    pool[cursor] = v
                    cursor += 1
            out[i]["pay_len"] = cursor - out[i]["pay_off"]
        return "done", len(s), cursor

    b = engine()
    assert b.ctx.send_compiled(2 * len(src), ids.size, kernel, src, dst, ids) == ("done",)
    ga, gb = a.sends.take(), b.sends.take()
    assert len(gb) == 4 and np.array_equal(ga.msgs, gb.msgs)
    assert np.array_equal(ga.payload, gb.payload)
    assert gb.msgs["time"][1] == 1005 and (gb.msgs["time"][[0, 2, 3]] > 1000 + src[[0, 2, 3]]).all()

    def boom(out, pool, cursor, hr, rdist, lan):
        put_send(out, 0, 1, 2, PING, 0, hr, rdist, lan)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        b.ctx.send_compiled(3, 10, boom)
    with pytest.raises(ValueError, match="wrote 4 of 3 rows"):
        b.ctx.send_compiled(3, 0, lambda out, pool, cursor, *_: (4, cursor))
    assert len(b.sends) == 0 and len(b.sends.take().payload) == 0


def test_cell_order_equals_lexsort_for_small_and_large_cells():
    """A cell's dispatch order (type, time, src, seq; stable) from the compiled merge sort
    is np.lexsort's, with many equal keys, below, at and across its insertion runs."""
    from emulator.batch import dispatch_order

    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 7, 32, 33, 64, 65, 300, 5000, 20000):
        m = new_messages(n, ENGINE_DTYPE, src=rng.integers(0, 4, n), dst=0,
                         type=rng.integers(0, 3, n), sent=0)
        m["time"] = rng.integers(0, 3, n)
        m["seq"] = rng.integers(0, 2, n)
        ref = np.lexsort((m["seq"], m["src"], m["time"], m["type"]))
        assert np.array_equal(dispatch_order(m), ref)


def test_run_bounds_cut_where_the_value_changes():
    from emulator.kernels import run_bounds

    assert run_bounds(np.array([], np.int16)).tolist() == [0]
    assert run_bounds(np.array([3], np.int16)).tolist() == [0, 1]
    assert run_bounds(np.array([1, 1, 2, 5, 5, 5, 1], np.int16)).tolist() == [0, 2, 3, 6, 7]


def test_cell_runs_give_bounds_local_indices_and_the_alive_check():
    from emulator.kernels import cell_runs, run_bounds

    rng = np.random.default_rng(3)
    local_index = np.full(50, -1, np.int32)
    mine = rng.choice(50, 20, replace=False)
    local_index[mine] = np.arange(20, dtype=np.int32)
    for n in (0, 1, 7, 300):
        types = np.sort(rng.integers(10, 14, n)).astype(np.int16)
        dst = rng.choice(mine, n).astype(np.int32)
        alive = np.ones(20, bool)
        bounds, li, all_alive = cell_runs(types, dst, local_index, alive)
        assert bounds.tolist() == run_bounds(types).tolist()
        assert li.dtype == np.int64 and li.tolist() == local_index[dst].tolist()
        assert all_alive
        if n:
            alive[local_index[dst[n // 2]]] = False
            assert not cell_runs(types, dst, local_index, alive)[2]


def test_router_latency_keeps_its_own_table_only_while_the_copies_fit(lat, monkeypatch):
    from emulator import latency as latency_mod

    own = lat.for_shard(2)
    assert own is not lat and not np.shares_memory(own.router_dist_us, lat.router_dist_us)
    assert np.array_equal(own.router_dist_us, lat.router_dist_us)
    a, b = np.arange(0, lat.n_hosts, 7), np.arange(3, lat.n_hosts + 3, 7) % lat.n_hosts
    assert np.array_equal(own.latency(a, b), lat.latency(a, b))
    monkeypatch.setattr(latency_mod, "PRIVATE_TABLE_BYTES", 2 * lat.router_dist_us.nbytes)
    assert lat.for_shard(2) is not lat and lat.for_shard(3) is lat


def test_type_counts_equal_numpy_unique():
    from emulator.kernels import type_counts

    rng = np.random.default_rng(3)
    for n in (0, 1, 5, 300):
        ty = rng.integers(-2, 7, n).astype(np.int16)
        found, counts = type_counts(ty)
        ref_t, ref_c = np.unique(ty, return_counts=True)
        order = np.argsort(found)
        assert np.array_equal(found[order], ref_t) and np.array_equal(counts[order], ref_c)
        if n:   # in order of first appearance
            assert found[0] == ty[0]


def test_rank_within_counts_earlier_equal_keys():
    assert rank_within(np.array([5, 3, 5, 5, 3, 9])).tolist() == [0, 0, 1, 2, 1, 0]
    assert rank_within(np.array([], np.int64)).tolist() == []


# the default ring holds every test message; a ring of 4 cells sends most to the heap
RINGS = pytest.mark.parametrize("ring", [RING_CELLS, 4])


@RINGS
def test_queue_pops_a_cell_in_dispatch_order_with_its_payload(ring):
    """pop_cell hands out a cell sorted as dispatch_order sorts the unordered pop (ties
    too), each row with its own payload."""
    from emulator.batch import dispatch_order

    rng = np.random.default_rng(11)
    a, b = EventQueue(1000, ring_cells=ring), EventQueue(1000, ring_cells=ring)
    for _ in range(30):
        n = int(rng.integers(1, 120))
        m = new_messages(n, time=rng.integers(0, 8_000, n), src=rng.integers(0, 5, n),
                         type=rng.integers(10, 13, n), seq=rng.integers(0, 3, n))
        m["dst"] = np.arange(n)       # tells rows with equal keys apart
        p = pack_rows(np.where(rng.random((n, 4)) < 0.5, rng.integers(0, 99, (n, 4)), -1))
        m["pay_off"], m["pay_len"] = p["pay_off"], p["pay_len"]
        a.push(Batch(m.copy(), p["payload"]))
        b.push(Batch(m.copy(), p["payload"]))
    n = 20_000   # one cell past kernels.SORT_MAX: ordered by lexsort after the pop
    m = new_messages(n, time=rng.integers(8_000, 9_000, n), src=rng.integers(0, 5, n),
                     type=rng.integers(10, 13, n), seq=rng.integers(0, 3, n))
    m["dst"] = np.arange(n)
    a.push(Batch(m.copy()))
    b.push(Batch(m.copy()))
    for cell in range(9):
        got = a.pop_cell(cell)
        plain = b.pop_before((cell + 1) * 1000)
        want = plain.take(dispatch_order(plain.msgs))
        assert len(got) and np.array_equal(got.msgs, want.msgs)
        assert np.array_equal(got.payload, want.payload)


@RINGS
def test_queue_returns_each_cell_whole_and_in_order(ring):
    q = EventQueue(1000, ring_cells=ring)
    rng = np.random.default_rng(0)
    times = []
    for _ in range(40):
        t = rng.integers(0, 100_000, size=rng.integers(1, 50))
        times.append(t)
        q.push(Batch(new_messages(len(t), time=t)))
    allt = np.sort(np.concatenate(times))
    assert q.next_time() == allt[0] and len(q) == len(allt)
    got = []
    while q.next_cell() != NEVER:
        c = q.next_cell()
        b = q.pop_cell(c).msgs["time"]
        assert len(b) and (b // 1000 == c).all()
        assert not got or c > got[-1][0] // 1000
        got.append(np.sort(b))
    assert np.array_equal(np.concatenate(got), allt)
    assert len(q) == 0 and len(q.pop_cell(3)) == 0


@RINGS
def test_queue_keeps_rows_and_payload_through_growth_and_packing(ring):
    """Thousands of messages with payload pushed and popped at random: every popped
    message is one pushed, with its own payload, exactly once, and nothing is popped
    early or late (the pool grows several times and its payload is packed). Pops stop
    inside cells, and pushes come due before the ring's first cell (late) and beyond it."""
    q = EventQueue(1000, ring_cells=ring)
    rng = np.random.default_rng(5)
    pushed, popped, seq = {}, {}, 0
    now = 0
    for _ in range(600):
        if rng.random() < 0.55:
            # pushes of a few records (copied in the compiled call) and of many (by numpy)
            n = int(rng.integers(1, 400) if rng.random() < 0.8 else rng.integers(500, 1500))
            m = new_messages(n, time=rng.integers(max(now - 3_000, 0), now + 300_000, n),
                             seq=np.arange(seq, seq + n))
            seq += n
            rows = np.where(rng.random((n, 9)) < 0.6, rng.integers(0, 10**6, (n, 9)), -1)
            p = pack_rows(rows)
            m["pay_off"], m["pay_len"] = p["pay_off"], p["pay_len"]
            b = Batch(m, p["payload"]).take(rng.random(n) < 0.7)   # a subset's payload
            for i in range(len(b)):
                pushed[int(b.msgs["seq"][i])] = (int(b.msgs["time"][i]), b.segment(i).tolist())
            q.push(b)
        elif q.next_time() != NEVER:
            now = q.next_time() + int(rng.integers(0, 20_000))
            b = q.pop_before(now)
            assert len(b) and (b.msgs["time"] < now).all() and q.next_time() >= now
            for i in range(len(b)):
                s = int(b.msgs["seq"][i])
                assert s not in popped
                popped[s] = (int(b.msgs["time"][i]), b.segment(i).tolist())
    rest = q.snapshot()
    assert len(rest) == len(q) == len(pushed) - len(popped)
    for i in range(len(rest)):
        popped[int(rest.msgs["seq"][i])] = (int(rest.msgs["time"][i]), rest.segment(i).tolist())
    assert popped == pushed
    q.clear()      # keeps its pools: still a working, empty queue
    assert len(q) == 0 and q.next_time() == NEVER and len(q.pop_before(NEVER)) == 0
    q.push(Batch(new_messages(3, time=[5, 1, 9], seq=[0, 1, 2])))
    assert sorted(q.pop_before(6).msgs["time"].tolist()) == [1, 5] and len(q) == 1


@RINGS
def test_compacted_queue_shrinks_and_pops_what_its_twin_pops(ring):
    """After a burst is popped, compact() shrinks the pools to the pending messages and
    every later pop (rows, payload, order) is the one of an uncompacted twin; messages of
    the ring stay in the ring."""
    rng = np.random.default_rng(3)
    a, b = EventQueue(1000, ring_cells=ring), EventQueue(1000, ring_cells=ring)
    n = 50_000
    m = new_messages(n, time=rng.integers(0, 40_000, n), src=rng.integers(0, 9, n),
                     seq=np.arange(n))
    p = pack_rows(np.where(rng.random((n, 3)) < 0.5, rng.integers(0, 99, (n, 3)), -1))
    m["pay_off"], m["pay_len"] = p["pay_off"], p["pay_len"]
    for q in (a, b):
        q.push(Batch(m.copy(), p["payload"]))
        q.pop_before(39_000)
    big = len(a._rows)
    a.compact()
    assert len(a) == len(b) > 0 and len(a._rows) < big // 4
    assert int(a._meta[0]) == 0    # the ring kept its first cell: cell 39 is in it
    a.compact()                    # already small: nothing to do
    got, want = a.pop_cell(39), b.pop_cell(39)
    assert len(got) and np.array_equal(got.msgs, want.msgs)
    assert np.array_equal(got.payload, want.payload)
    assert len(a) == len(b) == 0
    a.compact()
    assert len(a._rows) == 1024 and a.next_time() == NEVER


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("in_time_order", [True, False])
def test_deferred_batch_pops_as_if_pushed(in_time_order, sparse):
    """A large batch handed over with defer (read-only, as from the object store) waits
    outside the pools and moves in as it comes due: next time and cell, length, snapshot
    and every pop (rows, payload, order) are those of a twin that pushed it. The same
    sent as a SparseBatch (the driver's stimuli): the fields it sets only."""
    rng = np.random.default_rng(8)
    a, b = EventQueue(1000), EventQueue(1000)
    n = 30_000
    t = rng.integers(5_000, 900_000, n)
    m = new_messages(n, time=np.sort(t) if in_time_order else t, src=rng.integers(0, 9, n),
                     seq=np.arange(n))
    p = pack_rows(np.where(rng.random((n, 3)) < 0.5, rng.integers(0, 99, (n, 3)), -1))
    m["pay_off"], m["pay_len"] = p["pay_off"], p["pay_len"]
    m.flags.writeable = False
    payload = p["payload"].copy()
    payload.flags.writeable = False
    early = new_messages(3, time=[100, 2_500, 7_000], seq=[n, n + 1, n + 2])
    if sparse:
        sent = SparseBatch(Batch(m, payload))
        assert sorted(sent.columns) == ["pay_len", "pay_off", "seq", "src", "time"]
        assert np.array_equal(sent.records(), m)
        some = rng.random(n) < 0.3           # rows by mask, by indices, by slice
        for idx in (some, np.flatnonzero(some)[::-1], slice(7, 70)):
            assert np.array_equal(take_rows(sent, idx), m[idx])
        assert np.array_equal(sent["time"], m["time"])
        unsent = next(f for f in m.dtype.names if f not in sent.columns)
        assert sent[unsent].dtype == m.dtype[unsent] and not sent[unsent].any()
        for col in sent.columns.values():
            col.flags.writeable = False
        a.defer(sent)
    else:
        a.defer(Batch(m, payload))
    b.push(Batch(m.copy(), payload.copy()))
    for q in (a, b):
        q.defer(Batch(early.copy()))                 # small: straight into the pools
    assert a._in_pools() == 3 and len(a) == len(b) == n + 3
    snap_a, snap_b = a.snapshot(), b.snapshot()
    assert np.array_equal(snap_a.msgs, snap_b.msgs)
    assert np.array_equal(snap_a.payload, snap_b.payload)
    now = 0
    while b.next_time() != NEVER:
        assert a.next_time() == b.next_time() and a.next_cell() == b.next_cell()
        now = b.next_time() + int(rng.integers(0, 40_000))
        a.release(now - 1_000)     # any earlier release changes nothing
        got, want = a.pop_cell(now // 1000), b.pop_cell(now // 1000)
        assert np.array_equal(got.msgs, want.msgs)
        assert np.array_equal(got.payload, want.payload)
        assert len(a) == len(b)
        assert a._in_pools() <= n // 4    # only what came due moved in
    assert a.next_time() == NEVER and len(a) == 0


def test_node_streams_do_not_depend_on_batching():
    nodes = np.array([7, 7, 3, 7, 3])
    draws = np.array([0, 1, 0, 2, 1])
    together = node_uniform(11, nodes, draws)
    apart = np.array([node_uniform(11, [n], [d])[0] for n, d in zip(nodes, draws, strict=True)])
    assert np.array_equal(together, apart)
    assert len(np.unique(together)) == 5 and ((together >= 0) & (together < 1)).all()
    assert not np.array_equal(node_uniform(12, nodes, draws), together)


def test_lookahead_matches_brute_force(topo, lat):
    part = partition_routers(topo, 3)[topo.host_router]
    d = lat.latency(np.arange(topo.n_hosts)[:, None], np.arange(topo.n_hosts)[None, :])
    cross = part[:, None] != part[None, :]
    assert lat.cross_lookahead_us(part) == d[cross].min()
    off = ~np.eye(topo.n_hosts, dtype=bool)
    assert lat.min_latency_us() == d[off].min() == topo.min_latency_us
    assert np.array_equal(lat.latency([0, 5, 9], [3, 5, 1]), topo.latency([0, 5, 9], [3, 5, 1]))


def test_engine_alone_processes_cells_causally(lat):
    n = lat.n_hosts
    e = ShardEngine(0, np.zeros(n, np.int32), lat, functools.partial(Flood, 2, 5), seed=1,
                    delta_us=lat.min_latency_us(), message_dtype=FLOOD_DTYPE)
    e.accept([Batch(new_messages(4, FLOOD_DTYPE, time=[0, 10, 20, 30], src=[1, 2, 3, 4],
                                 dst=[1, 2, 3, 4], type=PING))])
    nxt, out, stats = e.advance(NEVER, "p", [])
    assert nxt == NEVER and stats["events"] == 4 * (2 ** 6 - 1)
    logs = e.take_logs()
    rows = logs["recv"].to_pandas()
    d = lat.min_latency_us()
    assert ((rows.time >= rows.cell) & (rows.time < rows.cell + d)).all()
    hop = rows.hops > 0
    assert (rows.time[hop] == rows.sent[hop] + lat.latency(rows.src[hop], rows.node[hop])).all()
    # no message log fields declared: the engine's columns only
    assert logs["message"].column_names == ["time", "arrival", "type", "src", "dst", "phase"]


def test_rows_by_shard_groups_rows_in_order():
    from emulator.kernels import rows_by_shard

    rng = np.random.default_rng(5)
    node_shard = rng.integers(0, 4, 100).astype(np.int32)
    for n in (0, 1, 9, 500):
        dst = rng.integers(0, 100, n)
        order, starts, shards = rows_by_shard(dst, node_shard, 4)
        of = node_shard[dst]
        assert order.tolist() == np.argsort(of, kind="stable").tolist()
        assert starts.tolist() == [0, *np.cumsum(np.bincount(of, minlength=4)).tolist()]
        assert shards.tolist() == np.unique(of).tolist()


def test_a_pass_goes_to_its_shards_in_row_order_with_its_payload(lat):
    """ShardEngine._route at shard 1 of 3: each other shard's outbox holds its rows of the
    pass in row order with their payload packed (what Batch.take gives), and the queue
    returns this shard's rows with theirs."""
    n = lat.n_hosts
    node_shard = (np.arange(n) % 3).astype(np.int32)
    e = ShardEngine(1, node_shard, lat, functools.partial(Flood, 2, 4), seed=1,
                    delta_us=lat.min_latency_us(), message_dtype=FLOOD_DTYPE)
    rng = np.random.default_rng(4)
    k = 60
    dst = rng.integers(0, n, k)
    m = new_messages(k, FLOOD_DTYPE, time=rng.integers(10_000, 20_000, k), type=PING,
                     src=rng.choice(e.nodes, k), dst=dst)
    lens = rng.integers(0, 3, k)
    m["pay_len"], m["pay_off"] = lens, np.r_[0, np.cumsum(lens)[:-1]]
    payload = rng.integers(0, 1000, int(lens.sum()))
    e._route(m, payload)
    whole = Batch(m.copy(), payload)      # m as stamped (sequence numbers) by _route
    shard = node_shard[dst]
    for s in (0, 2):
        got, want = Batch.concat(e.outbox[s], FLOOD_DTYPE), whole.take(shard == s)
        assert got.msgs.tobytes() == want.msgs.tobytes()
        assert got.payload.tolist() == want.payload.tolist()
    mine = whole.take(shard == 1)
    popped = []
    while (cell := e.queue.next_cell()) != NEVER:
        b = e.queue.pop_cell(cell)
        popped += [(int(r["src"]), int(r["seq"]), int(r["dst"]), int(r["time"]),
                    b.segment(i).tolist()) for i, r in enumerate(b.msgs)]
    assert sorted(popped) == sorted(
        (int(r["src"]), int(r["seq"]), int(r["dst"]), int(r["time"]), mine.segment(i).tolist())
        for i, r in enumerate(mine.msgs))


class _LocalIndexCheck(Flood):
    """Flood that checks the local indices the engine hands over with each run."""

    checked = 0

    def handle(self, ctx, type_code, batch):
        assert batch.local is not None and batch.local.dtype == np.int64
        assert batch.local.tolist() == ctx.local(batch.msgs["dst"]).tolist()
        type(self).checked += len(batch)
        super().handle(ctx, type_code, batch)


def test_engine_hands_each_run_its_local_indices(lat):
    n = lat.n_hosts
    node_shard = (np.arange(n) % 2).astype(np.int32)   # local index != global id
    e = ShardEngine(1, node_shard, lat, functools.partial(_LocalIndexCheck, 2, 4), seed=1,
                    delta_us=lat.min_latency_us(), message_dtype=FLOOD_DTYPE)
    e.accept([Batch(new_messages(3, FLOOD_DTYPE, time=[0, 10, 20], src=[1, 3, 5],
                                 dst=[1, 3, 5], type=PING))])
    e.advance(NEVER, "p", [])
    assert _LocalIndexCheck.checked == e.events > 3


# ---- on Ray ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_session(session):
    """The test session's embedded Ray (tests/conftest.py)."""
    import ray
    return ray


def _flood(lat, tmp_path, ray, shards=1, node_shard=None, seed=5, phase="p", handoff=False,
           relay_above=8, relay_fanout=4, exact_causes=32, flood=(3, 7), local_links=True,
           **kw):
    from emulator import Emulator
    emu = Emulator(lat.n_hosts, lat, functools.partial(Flood, *flood, **kw), shards=shards,
                   node_shard=node_shard, seed=seed, run_dir=tmp_path, type_names=TYPE_NAMES,
                   handoff=handoff, message_dtype=FLOOD_DTYPE, message_log_fields=("hops",),
                   relay_above=relay_above, relay_fanout=relay_fanout,
                   exact_causes=exact_causes, local_links=local_links)
    starts = np.arange(8)
    emu.inject(new_messages(8, FLOOD_DTYPE, time=starts * 3000, src=starts * 100,
                            dst=starts * 100, type=PING))
    return emu


def _table(ray, emu, name):
    """Every logged row of `name`: the hand-off's refs, or the Parquet the shards wrote."""
    if emu.handoff:
        t = pa.concat_tables([r.table() for r in emu.logs(name)]).to_pandas()
    else:
        t = emu.storage.read_events(name, emu.topo_index).to_pandas()
    return t.sort_values(list(t.columns)).reset_index(drop=True)


@pytest.mark.slow
def test_same_log_for_any_shard_count_and_partition(topo, lat, tmp_path, ray_session):
    ray = ray_session
    results, windows = [], {}
    # one, two and three shards; round robin (the default), random and locality (three
    # shards round robin would be one more small-lookahead split like random's)
    parts = {
        "k1": dict(shards=1), "k2": dict(shards=2),
        # (every push a Ray call: the shards of one machine use local links otherwise)
        "k2_ray_pushes": dict(shards=2, local_links=False),
        # (and the rounds' cheaper bound on the earliest times: exact for one shard only)
        "random3": dict(node_shard=np.random.default_rng(3).integers(0, 3, topo.n_hosts),
                        exact_causes=1),
        "locality3": dict(node_shard=partition_routers(topo, 3)[topo.host_router]),
    }
    linked = {}
    for name, kw in parts.items():
        emu = _flood(lat, tmp_path / name, ray, **kw)
        linked[name] = ray.get([a.link_peers.remote() for a in emu._actors])
        stats = emu.run("p")
        windows[name] = (stats["windows"], emu.lookahead_us, stats["rounds"])
        emu.call("dump", "p", phase="p")
        emu.flush("p")
        results.append((name, _table(ray, emu, "recv"), _table(ray, emu, "message")))
        emu.shutdown()
    _, recv0, msg0 = results[0]
    assert len(recv0) == 8 * (3 ** 8 - 1) // 2
    # the message log: the engine's columns and the one field the protocol asked for (and
    # `topo`, the hive directory the Parquet files are read from)
    assert list(msg0.columns) == ["time", "arrival", "type", "src", "dst", "hops", "phase",
                                  "topo"]
    # one row per hop between two nodes (pings a node sent itself are not hops)
    assert len(msg0) == (recv0.src != recv0.node).sum() and msg0.hops.max() == 7
    for name, recv, msg in results[1:]:
        assert recv.equals(recv0), name
        assert msg.equals(msg0), name
    # one Ray node: every pair of shards linked, unless the pushes go through Ray
    assert linked["k2"] == [[1], [0]] and linked["locality3"][1] == [0, 2]
    assert linked["k1"] == [[]] and linked["k2_ray_pushes"] == [[], []]
    # locality partition: longer lookahead, fewer synchronisation rounds than random
    assert windows["locality3"][1] > windows["random3"][1]
    assert windows["locality3"][0] < windows["random3"][0]
    # the shards bound each other's windows: the driver starts far fewer rounds than the
    # windows they run (one shard: a window per round)
    assert windows["k1"][2] == windows["k1"][0]
    for name in ("k2", "random3", "locality3"):
        assert windows[name][2] * 3 < windows[name][0], (name, windows[name])
    # Parquet files are written per table, topo and phase
    assert list((tmp_path / "k2" / "events" / "recv" / "topo=0").glob("p-shard1*.parquet"))
    assert list((tmp_path / "k2" / "events" / "message_type" / "topo=0").glob("*.parquet"))


@pytest.mark.slow
def test_timers_idle_jumps_and_failures(lat, tmp_path, ray_session):
    ray = ray_session
    from emulator import Emulator
    n = lat.n_hosts
    emu = Emulator(n, lat, functools.partial(Flood, 1, 0, period_us=1_000_000,
                                             stop_us=600_000_000),
                   shards=2, seed=1, run_dir=tmp_path, type_names=TYPE_NAMES,
                   message_dtype=FLOOD_DTYPE)
    assert emu.idle is False  # the timers set up by the stack are known to the driver
    emu.fail([3, 4], 2_500_000)
    emu.recover([3], 3_500_000)
    stats = emu.run("t", until=600_000_001)
    emu.flush("t")
    ticks = _table(ray, emu, "tick")
    # exact timer times; node 4 stops at its failure, node 3 misses one tick only
    per = ticks.groupby("node").time.apply(list)
    assert per[0] == [k * 1_000_000 for k in range(1, 601)]
    assert per[4] == [1_000_000, 2_000_000]
    assert per[3] == [1_000_000, 2_000_000]  # its timer chain died with it (state is kept)
    assert ((ticks.time >= ticks.cell) & (ticks.time < ticks.cell + emu.delta_us)).all()
    # 600 seconds of virtual time with events once a second: rounds ~ busy cells, not
    # time; between ticks the idle shards leave their round rather than creep through it
    # (600 s: 5,000 took two minutes of CI for the same check)
    assert stats["windows"] <= 600 + 10
    assert stats["rounds"] <= 600 + 10 and stats["rounds_ended_early"] > 0
    c = emu.counters()
    assert c["lost"].get("test.tick", 0) >= 2
    failed = _table(ray, emu, "failed")
    assert sorted(failed.node) == [3, 4]
    emu.shutdown()


@pytest.mark.slow
def test_shard_profiles_hold_each_phase_of_each_shard(lat, tmp_path, ray_session):
    """bench_scale --profile-shards: every shard profiles its rounds per phase (CPU clock)
    and writes them where asked; turned off, nothing is kept."""
    import pstats
    emu = _flood(lat, tmp_path / "run", ray_session, shards=2, flood=(2, 3))   # a small one
    emu.profile_rounds()
    emu.run("p")
    paths = emu.dump_profiles(tmp_path / "prof")
    assert sorted(Path(p).name for p in paths) == ["shard0-p.prof", "shard1-p.prof"]
    for p in paths:
        st = pstats.Stats(p).stats
        advance = [v for (f, _, name), v in st.items()
                   if name == "advance" and f.endswith("engine.py")]
        assert advance and advance[0][1] >= 1     # the engine's window loop, called
    emu.profile_rounds(False)
    assert emu.dump_profiles(tmp_path / "none") == []
    emu.shutdown()


@pytest.mark.slow
def test_sparse_traffic_grows_the_window_cap_and_now_is_the_last_cell(lat, tmp_path,
                                                                       ray_session):
    from emulator import Emulator
    from emulator.driver import CAP_MAX_FACTOR
    emu = Emulator(lat.n_hosts, lat, functools.partial(Flood, 1, 0, period_us=150_000,
                                                       stop_us=30_000_000),
                   shards=1, seed=1, run_dir=tmp_path, type_names=TYPE_NAMES,
                   message_dtype=FLOOD_DTYPE)
    stats = emu.run("t")
    # a tick every 150 ms for 30 s: 150 windows at the 200 ms cap, far fewer once it grows
    assert stats["windows"] < 40
    assert emu._cap_us > emu.window_cap_us
    assert emu._cap_us <= CAP_MAX_FACTOR * emu.window_cap_us
    # `now` is the end of the last cell processed (the last tick's), not of the last
    # (long) window, so a stimulus may come right after the last event
    last_tick = 30_000_000 // 150_000 * 150_000
    assert emu.now == last_tick - last_tick % emu.delta_us + emu.delta_us
    emu.inject(new_messages(1, FLOOD_DTYPE, time=emu.now, src=0, dst=0, type=PING))
    assert emu.run("u")["messages"] == 1
    emu.shutdown()


@pytest.mark.slow
def test_stimuli_after_a_phase_void_the_promises_made_in_it(lat, tmp_path, ray_session):
    """Promises say "nothing more from me before t" given what a shard holds; a stimulus
    injected after a phase can be due before a promise its shard made while idle at the
    end of that phase. The next phase must not trust those promises: a shard-1 node relays
    at once to its nearest shard-0 host while shard 0 has local events every cell."""
    from emulator import Emulator
    from emulator.driver import round_robin
    n = lat.n_hosts
    node_shard = round_robin(n, 2)
    on0, on1 = np.flatnonzero(node_shard == 0), np.flatnonzero(node_shard == 1)
    delay = lat.latency(np.repeat(on1, len(on0)), np.tile(on0, len(on1))).reshape(
        len(on1), len(on0))
    a, b = np.unravel_index(np.argmin(delay), delay.shape)
    relay_from, relay_to = int(on1[a]), int(on0[b])
    for seed in (1, 2, 3):
        emu = Emulator(n, lat, functools.partial(Flood, 3, 4), shards=2, node_shard=node_shard,
                       seed=seed, run_dir=tmp_path / str(seed), type_names=TYPE_NAMES,
                       message_dtype=FLOOD_DTYPE)
        emu.inject(new_messages(4, FLOOD_DTYPE, time=[0, 1000, 2000, 3000], src=on1[:4],
                                dst=on1[:4], type=PING))
        emu.run("a")
        t = emu.now
        # the idle shards promised past `now` at the end of phase a (the test's premise)
        held = emu._actors[0].__ray_call__.remote(lambda s: int(s._promise_in[1]))
        assert ray_session.get(held) > t + int(delay[a, b]) + emu.delta_us
        local = on0[:300]
        emu.inject(new_messages(len(local), FLOOD_DTYPE, time=t + np.arange(len(local)) * 500,
                                src=local, dst=local, type=PING, hops=4))
        emu.inject(new_messages(1, FLOOD_DTYPE, time=t, src=relay_from, dst=relay_from,
                                type=RELAY, hops=relay_to))
        emu.run("b")
        emu.flush("b")
        recv = _table(ray_session, emu, "recv")
        got = recv[(recv.phase == "b") & (recv.node == relay_to) & (recv.src == relay_from)]
        assert got.time.tolist() == [t + int(delay[a, b])]
        emu.shutdown()


@pytest.mark.slow
def test_handler_crash_names_shard_and_time(lat, tmp_path, ray_session):
    from emulator import EmulationError, Emulator
    emu = Emulator(lat.n_hosts, lat, functools.partial(Flood, 1, 1), shards=2, seed=1,
                   run_dir=tmp_path, type_names=TYPE_NAMES, message_dtype=FLOOD_DTYPE)
    # an engine-only record is widened to the stack's by field name
    emu.inject(new_messages(1, time=40_000, src=7, dst=7, type=BOOM))
    with pytest.raises(EmulationError, match=r"shard 1 failed .* at virtual time 40000 us.*boom"):
        emu.run("x")
    emu.shutdown()


@pytest.mark.slow
def test_relayed_rounds_name_the_shard_that_failed_or_died(lat, tmp_path, ray_session):
    """Rounds started through the shards' relay calls (relay_above=0; here a chain,
    fanout 1: shard 2 is called by shard 1, called by shard 0) log what one shard logs,
    with one driver call per round, and report a handler's error and a dead process as
    direct rounds do, naming the shard two levels down."""
    import os
    import signal

    from emulator import EmulationError, Emulator, ShardLostError
    ray = ray_session
    logs = []
    for name, kw in (("k1", dict(shards=1)),
                     ("relay3", dict(shards=3, relay_above=0, relay_fanout=1))):
        emu = Emulator(lat.n_hosts, lat, functools.partial(Flood, 2, 3), seed=5,
                       run_dir=tmp_path / name, type_names=TYPE_NAMES,
                       message_dtype=FLOOD_DTYPE, **kw)
        emu.inject(new_messages(6, FLOOD_DTYPE, time=np.zeros(6, np.int64),
                                src=np.arange(6) * 7, dst=np.arange(6) * 7, type=PING))
        stats = emu.run("p")
        if name == "relay3":
            assert stats["shard_calls"] == stats["rounds"] > 1, stats
        emu.flush("p")
        logs.append(_table(ray, emu, "recv"))
        emu.shutdown()
    assert len(logs[0]) == 6 * (2 ** 4 - 1)
    assert logs[1].equals(logs[0])

    emu = Emulator(lat.n_hosts, lat, functools.partial(Flood, 1, 1), shards=3, seed=1,
                   run_dir=tmp_path / "boom", type_names=TYPE_NAMES,
                   message_dtype=FLOOD_DTYPE, relay_above=0, relay_fanout=1)
    emu.inject(new_messages(1, time=40_000, src=5, dst=5, type=BOOM))   # node 5: shard 2
    with pytest.raises(EmulationError, match=r"shard 2 failed .* at virtual time 40000 us.*boom"):
        emu.run("x")
    emu.shutdown()

    emu = _flood(lat, tmp_path / "kill", ray, shards=3, relay_above=0, relay_fanout=1)
    emu.run("p", until=6_000)
    pid = ray.get(emu._actors[2].__ray_call__.remote(lambda a: os.getpid()))
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ShardLostError, match=r"shard 2 crashed during phase 'p'"):
        emu.run("p")
    emu.shutdown()


@pytest.mark.slow
def test_checkpoint_resume_gives_identical_results(lat, tmp_path, ray_session):
    ray = ray_session

    def second_phase(emu):
        emu.inject(new_messages(5, FLOOD_DTYPE, time=emu.now + np.arange(5) * 7000,
                                src=np.arange(5) * 11, dst=np.arange(5) * 11, type=PING))
        emu.run("b")
        emu.flush("b")
        rows = _table(ray, emu, "recv")
        return rows[rows.phase == "b"].reset_index(drop=True), emu.call("dump", "b", phase="b")

    # the hand-off: the shards send their checkpoint state to the driver (run_dir)
    emu = _flood(lat, tmp_path / "a", ray, shards=2, period_us=0, handoff=True)
    emu.run("a", until=60_000)  # stop mid-flood: messages in flight across shards
    emu.flush("a")
    emu.checkpoint("a")
    ref = second_phase(emu)
    emu.shutdown()

    emu2 = _flood(lat, tmp_path / "a", ray, shards=2, handoff=True)  # fresh shards
    emu2.restore("a")
    got = second_phase(emu2)
    emu2.shutdown()
    assert got[1] == ref[1]
    rows_b = ref[0]
    assert len(rows_b) > 0 and got[0].equals(rows_b)


def test_engine_record_holds_only_engine_fields():
    """The engine's own record is its header and payload fields, none of the fields the
    protocols declare; the stack's record keeps them, with the engine's types, and its
    payload columns last."""
    from actors.messages import MSG_DTYPE, PASTRY_MESSAGE_FIELDS, SCRIBE_MESSAGE_FIELDS
    from emulator.batch import ENGINE_HEAD_FIELDS, PAYLOAD_FIELDS
    engine = [n for n, _ in ENGINE_HEAD_FIELDS] + [n for n, _ in PAYLOAD_FIELDS]
    assert sorted(ENGINE_DTYPE.names) == sorted(set(engine))
    protocols = {n for n, _ in [*PASTRY_MESSAGE_FIELDS, *SCRIBE_MESSAGE_FIELDS]} - set(engine)
    assert protocols and not protocols & set(ENGINE_DTYPE.names)
    assert all(MSG_DTYPE[n] == ENGINE_DTYPE[n] for n in ENGINE_DTYPE.names)
    assert MSG_DTYPE.names[-2:] == ENGINE_DTYPE.names[-2:] == ("pay_off", "pay_len")


def test_message_dtype_merges_declared_fields_by_name():
    d = message_dtype([("mode", "i1"), ("group", "i4")], [("group", "i4"), ("a", "i8")])
    assert d.names == ("time", "sent", "src", "dst", "seq", "type", "mode", "group", "a",
                       "pay_off", "pay_len")
    assert d.fields["group"][0] == np.dtype("i4")
    with pytest.raises(ValueError, match=r"'group' declared as int32 and as int64"):
        message_dtype([("group", "i4")], [("group", "i8")])
    with pytest.raises(ValueError, match=r"'time' declared as int64 and as int32"):
        message_dtype([("time", "i4")])
    with pytest.raises(TypeError, match="not a message record"):
        Batch(np.zeros(2, [("time", "i8"), ("src", "i4")]))


def test_records_convert_by_name_and_never_mix_in_a_batch():
    small = new_messages(2, time=[5, 6], src=[1, 2], dst=[3, 4], type=PING)
    wide = as_messages(small, FLOOD_DTYPE)
    assert wide.dtype == FLOOD_DTYPE and wide["dst"].tolist() == [3, 4]
    assert wide["hops"].tolist() == [0, 0]
    with pytest.raises(TypeError, match=r"unknown: \['hops'\]"):
        as_messages(wide, ENGINE_DTYPE)         # would drop a protocol column
    with pytest.raises(TypeError, match="different message records"):
        Batch.concat([Batch(small), Batch(wide)])   # rows are copied as raw bytes
    assert Batch.concat([], FLOOD_DTYPE).msgs.dtype == FLOOD_DTYPE


def test_engine_checks_its_log_fields(lat):
    def engine(fields):
        return ShardEngine(0, np.zeros(lat.n_hosts, np.int32), lat, Flood, seed=1,
                           delta_us=lat.min_latency_us(), message_dtype=FLOOD_DTYPE,
                           message_log_fields=fields)
    assert engine(("hops",)).message_log_fields == ("hops",)
    with pytest.raises(ValueError, match="not fields of the message record"):
        engine(("group",))
    with pytest.raises(ValueError, match="clash with the engine's log columns"):
        engine(("src",))


def test_emulator_imports_nothing_from_actors():
    for path in sorted((Path(__file__).resolve().parents[1] / "emulator").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n.split(".")[0] in ("actors", "runtime", "pyspark", "raydp")
                           for n in names), path
