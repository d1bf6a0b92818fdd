"""The protocol fast path changes nothing: a small Pastry run on the real ShardEngine
(protocol bootstrap with crashes, recoveries, keep-alives, repair; see
benchmarks/protocol_digest.py, which gives every setting that shapes the run) gives, for
one and two shards, the digest of its message log, route log, final tables and counters
that the numpy implementation the numba kernels replaced gives (commit 4f73e8c). A
change of any message, decision or log row fails this test; a deliberate protocol change
must record the new digest here and say why in its commit."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from protocol_digest import digest, run_faithful, run_workload  # noqa: E402

REFERENCE = {  # nodes -> digest from the numpy code (identical for 1 and 2 shards)
    200: "f4783aca02d36b3e8606e80de71f83f005bfc2a80c97cdc4c153ee1922fd397c",
    300: "f3836036a54d26dc75c89c8460f9a8f5e2c48ef5a57a5947642b4b6d14f4dbe6",
    600: "d13e3d0e63c771d632f14666b20b34ecc6ef703233ad1d17cbfc5ff59bef6460",
}


def _count_runs_taken(monkeypatch) -> dict:
    """{type: runs taken together by ``Pastry.handle_runs``}, filled as the run goes (the
    passes the compiled cell loop hands back); :func:`_runs_taken` adds the loop's."""
    from actors.pastry.protocol import Pastry

    real, taken = Pastry.handle_runs, {}

    def handle_runs(self, ctx, m, payload, local, bounds, run_types, first, last):
        done = real(self, ctx, m, payload, local, bounds, run_types, first, last)
        for r in range(first, done):
            taken[run_types[r]] = taken.get(run_types[r], 0) + 1
        return done
    monkeypatch.setattr(Pastry, "handle_runs", handle_runs)
    return taken


def _runs_taken(emu, by_python: dict) -> dict:
    """{type: runs taken together}: by ``Pastry.handle_runs`` and by the shards' compiled
    cell loops (``PastryCellLoop.runs_taken``)."""
    taken = dict(by_python)
    for e in emu.engines:
        for t in np.flatnonzero(e.stack.run_cells.runs_taken).tolist():
            taken[t] = taken.get(t, 0) + int(e.stack.run_cells.runs_taken[t])
    return taken


def _count_python_rows(monkeypatch) -> list:
    """[rows the Python loop dispatched, passes a compiled loop declined partway], filled
    as the run goes: of a pass declined at run r, the rows from run r on (the loop took
    the runs before it)."""
    from emulator.engine import ShardEngine

    real, counts = ShardEngine._dispatch, [0, 0]

    def dispatch(self, due, declined=-1):
        types = due.msgs["type"]
        run = np.cumsum(np.r_[False, types[1:] != types[:-1]])   # each row's run
        counts[0] += int((run >= max(declined, 0)).sum())
        counts[1] += declined > 0
        return real(self, due, declined)
    monkeypatch.setattr(ShardEngine, "_dispatch", dispatch)
    return counts


@pytest.mark.parametrize("shards", [1, 2])
def test_small_protocol_run_reproduces_the_reference_digest(shards, monkeypatch):
    """Keep-alives, crashes, recoveries and hop acks: the keep-alives (strangers'
    included: recovered nodes) are taken with the cell's other runs (``handle_runs``, or
    the compiled cell loop); the passes it hands back (timers, acks, failures) mix with
    those it takes, and both paths run many of them."""
    from actors.pastry.types import KEEPALIVE

    by_python = _count_runs_taken(monkeypatch)
    python_rows = _count_python_rows(monkeypatch)
    emu, _ = run_workload(200, shards)
    taken = _runs_taken(emu, by_python)
    assert taken.get(KEEPALIVE, 0) > 100, taken
    python = sum(e.python_events for e in emu.engines)
    assert python > 100 and python / sum(e.events for e in emu.engines) < 0.9
    # the engine counts what the Python loop took: of a pass the loop declined partway,
    # only the runs from the declined one
    assert python_rows[1] > 0 and python == python_rows[0]
    # the same messages by type: the keep-alives' timers among them
    by_type = [e.counters()["python_by_type"] for e in emu.engines]
    assert sum(sum(c.values()) for c in by_type) == python
    assert sum(c.get(KEEPALIVE, 0) for c in by_type) > 0, by_type
    # and the passes the loop handed back, by the type that stopped it
    assert sum(sum(e.handed_back_by_type.values()) for e in emu.engines) > 0
    d, rows = digest(emu)
    assert rows["message"] > 50_000 and rows["counters"]["counts.pastry_rejoins"] > 0
    assert d == REFERENCE[200]


def test_loop_with_small_buffers_reproduces_the_reference_digest(monkeypatch):
    """The compiled loop's buffers (hop log, outbox) small and never grown: it stops
    before a new cell while they are half full and the engine empties them and calls it
    again (``window.BUFFERS_HALF_FULL``), and a pass too large for them goes to the Python
    loop; the digest is the same. (One shard: its windows are long enough to fill them.)"""
    from emulator import window
    from emulator.engine import ShardEngine

    calls = {"loop": 0, "engine": 0}
    real_take, real_run = ShardEngine._take_loop_buffers, ShardEngine._run_loop

    def take(self, buffers):   # once per loop call
        calls["loop"] += 1
        return real_take(self, buffers)

    def run_loop(self, loop, end):   # once per the engine's call, which repeats a paused one
        calls["engine"] += 1
        return real_run(self, loop, end)
    monkeypatch.setattr(ShardEngine, "_take_loop_buffers", take)
    monkeypatch.setattr(ShardEngine, "_run_loop", run_loop)
    monkeypatch.setattr(window.LoopBuffers.__init__, "__defaults__", (256, 1024))
    monkeypatch.setattr(window.LoopBuffers, "grow", lambda self, rows, ints: None)
    emu, _ = run_workload(200, 1)
    assert calls["loop"] - calls["engine"] > 100, calls
    assert digest(emu)[0] == REFERENCE[200]


@pytest.mark.parametrize("shards", [1, 2])
def test_handlers_one_by_one_reproduce_the_reference_digest(shards, monkeypatch):
    """The same workload with every run given to its handler alone (no compiled cell
    loop, no ``handle_runs``): the Python handlers, each around its kernels -- the hop
    acknowledgements' (``HopAcks.receive``, ``expect``, ``on_ack``), a JOIN_REQ's with
    acknowledgements --, give the digest the compiled loop gives."""
    from actors.pastry.join import JoinProtocol
    from actors.pastry.protocol import Pastry
    from emulator.engine import ShardEngine

    monkeypatch.setattr(ShardEngine, "_loop_takes_next", lambda self, loop, end: False)
    monkeypatch.setattr(Pastry, "handle_runs", lambda self, ctx, m, p, l, b, t, first, last:
                        first)
    acked_requests = []
    real = JoinProtocol.on_join_req

    def on_join_req(self, ctx, batch):
        acked_requests.append(self.router.acks.enabled)
        return real(self, ctx, batch)
    monkeypatch.setattr(JoinProtocol, "on_join_req", on_join_req)
    emu, _ = run_workload(200, shards)
    assert sum(e.python_events for e in emu.engines) == sum(e.events for e in emu.engines)
    assert any(acked_requests)
    assert digest(emu)[0] == REFERENCE[200]


# the faithful-bootstrap workload (300 nodes, seed 5) on the handlers without their compiled
# versions (handler_kernels.py; commit 47d9126): logs sorted (any shard count), and in the
# order they were written, per shard count
FAITHFUL = "0a44ae3f5a94f0d748f45d1741580117636e38991e796c02cdbb91e3d0d5ddb0"
FAITHFUL_ORDERED = {1: "c096ce074c2367478e2fd4fa1321cc1c7c59f7218b4a1479458f64b69d78444c",
                    2: "0c9338f15469172efd358e785809b0302cdf09f790e2cc177d771b2f605d2603"}


@pytest.mark.parametrize("shards", [1, 2])
def test_faithful_bootstrap_reproduces_the_reference_digest(shards, monkeypatch):
    """No keep-alives, so no hop acks: the compiled lookup, refresh and exchange handlers
    run, in the compiled cell loop and, a pass at a time, through ``Pastry.handle_runs``
    (every other time the engine would call the compiled loop, the Python loop takes the
    next four cells instead here: both loops take turns on one run); their sends, in
    their order, are those of the Python handlers. The compiled loop stops for the queue
    to move its payload (``window.PAYLOAD_POOL_LOW``) many times."""
    from emulator.engine import ShardEngine
    from emulator.queue import EventQueue

    by_python = _count_runs_taken(monkeypatch)
    turns = {"loop": 0, "moves": 0}
    real_takes, real_move = ShardEngine._loop_takes_next, EventQueue.move_payload

    def takes_next(self, loop, end):
        turns["loop"] += 1
        if turns["loop"] % 2:
            return real_takes(self, loop, end)
        self._python_cells = 4
        return False

    def move_payload(self):
        turns["moves"] += 1
        real_move(self)
    monkeypatch.setattr(ShardEngine, "_loop_takes_next", takes_next)
    monkeypatch.setattr(EventQueue, "move_payload", move_payload)
    emu, _ = run_faithful(300, shards)
    taken = _runs_taken(emu, by_python)
    # every type of the stretch was taken together many times (so the digest covers it)
    assert set(taken) == set(emu.engines[0].stack.compiled_run_types)
    assert min(taken.values()) > 20, taken
    # both loops ran many passes
    python = sum(e.python_events for e in emu.engines)
    assert 0.01 < python / sum(e.events for e in emu.engines) < 0.9
    assert turns["moves"] > 10, turns
    d, rows = digest(emu, ordered=True)
    counters = rows["counters"]
    assert counters["counts.pastry_joined"] == 299 and counters["sent_by_type.29"] > 1000
    assert d == FAITHFUL_ORDERED[shards]
    emu, _ = run_faithful(300, shards)
    assert digest(emu)[0] == FAITHFUL
