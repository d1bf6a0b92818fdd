"""One window's synchronisation between two shards of one machine, by how they synchronise.

Every window of a round the shards exchange what bounds each other (a promise, the next
event time) and hand over their outboxes; at K = 2 on two cores that exchange is the
`n_w x s` term of docs/ARCHITECTURE.md's cost model, and the target is s <= 100 us. This
measures s per window, between two shards that each advance one window (a work kernel that
writes an outbox of RECORDS message records of 48 bytes and returns a next-event time),
publish their outbox and next event, and take the peer's, for:

- ``ray calls``: the driver calls both shard actors every window, as its rounds do
  (``ray.get([a.step.remote(...), b.step.remote(...)])``; the earliest times as raw bytes,
  each shard's head as the raw bytes of emulator/heads.py, read with numpy), and hands each
  shard the other's outbox (numpy) in the next window's call;
- ``ray pushes``: the shards push to each other inside one long call, as a round's windows
  do between machines (emulator/shard_actor.py: ``peer.deliver.remote(...)`` with the
  outbox and a promise, a second actor thread taking it, the round's thread waiting on a
  condition);
- ``local links``: the same pushes over emulator/local_link.py's links (a Unix domain
  socket per pair, a reader thread applying each frame), as the shards of one machine push
  to each other (the outbox: RECORDS engine records of 46 bytes);
- ``compiled graph``: a Ray Compiled Graph (``ray.dag``: InputNode -> each shard's step ->
  the other's take -> MultiOutputNode, ``experimental_compile``), whose channels between
  the actors on one machine are shared memory;
- ``threads, barrier``: the two shards as two threads of one process, each window a numba
  ``@njit(nogil=True)`` step over shared numpy arrays (outboxes double-buffered), then a
  ``threading.Barrier`` and a compiled copy of the peer's outbox;
- ``threads, spin``: the same threads with each whole window loop in one nogil compiled
  call, synchronised by spinning on a shared numpy counter (no Python, no GIL in the loop).

s per window is a window's wall time less the work of the shard in it (its own clock around
the work kernel; trivial here, a few us), after a warm-up; median and p90 over the windows.
The thread variants run once more with a work kernel of about ``--work-us`` (100 us) per
window: twice the work of one window (timed on one thread just before) over a window's
wall is the speed-up of the pair, 2 when the threads really run at once on two cores and 1
when they take turns. Every variant runs ``--runs`` times; Ray's run in a local Ray of
two CPUs, the threads before it starts.

    python benchmarks/bench_sync.py [--windows 2000] [--runs 2] [--work-us 100] [--json PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import ray
from numba import njit

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])
from report import add_json_option  # noqa: E402 (benchmarks/ is on sys.path)

from emulator import heads  # noqa: E402
from emulator.batch import ENGINE_DTYPE, Batch  # noqa: E402
from emulator.local_link import LinkClient, LinkServer  # noqa: E402

RECORDS = 100               # message records in a window's outbox
WIDTH = 6                   # int64 fields of a record: 48 bytes
WARMUP = 200                # windows run before the measured ones

_libc = ctypes.CDLL(None)
_clock_gettime = _libc.clock_gettime
_clock_gettime.argtypes = [ctypes.c_int, ctypes.c_void_p]
_clock_gettime.restype = ctypes.c_int
_MONOTONIC = 1


# ---- the shard's work and clock, compiled ------------------------------------------------

@njit(nogil=True)
def _now_ns(ts):
    """CLOCK_MONOTONIC in ns from compiled code (an opaque call: the spin loop re-reads
    shared memory after it)."""
    _clock_gettime(_MONOTONIC, ts.ctypes.data)
    return ts[0] * 1_000_000_000 + ts[1]


@njit(nogil=True, cache=True)
def _work(outbox, me, window, spins):
    """One window of a shard: `spins` rounds of arithmetic (the compute), then RECORDS
    message records into `outbox`; returns the next event time."""
    acc = 0.0
    for i in range(spins):
        acc += math.sqrt(i + window + 1.0)
    t = window * 1000 + (int(acc) & 7)
    for r in range(outbox.shape[0]):
        outbox[r, 0] = t + r
        outbox[r, 1] = me
        outbox[r, 2] = 1 - me
        outbox[r, 3] = r
        outbox[r, 4] = window
        outbox[r, 5] = 0
    return t


@njit(nogil=True, cache=True)
def _take(inbox, outbox):
    inbox[:] = outbox


@njit(nogil=True)
def _spin_loop(me, bufs, inbox, flags, nxt, windows, spins, stamps, ts):
    """A shard's whole window loop as one nogil call: per window the work, publish the
    outbox (bufs[w % 2, me]) and next event, count flags[me] up, spin until the peer's
    count reaches this window, take its outbox. stamps[w] = (start, work done, taken)."""
    peer = 1 - me
    for w in range(windows):
        stamps[w, 0] = _now_ns(ts)
        nxt[me] = _work(bufs[w & 1, me], me, w, spins)
        stamps[w, 1] = _now_ns(ts)          # an opaque call: the stores above are done
        flags[me] = w + 1
        while flags[peer] <= w:
            _now_ns(ts)                     # opaque: flags[peer] is read again
        inbox[:] = bufs[w & 1, peer]
        stamps[w, 2] = _now_ns(ts)
    return nxt[peer]


def _spins_for(us: float) -> int:
    """Work-kernel spins that take about `us` microseconds here."""
    out = np.zeros((RECORDS, WIDTH), np.int64)
    _work(out, 0, 0, 1000)
    n = 100_000
    t0 = time.perf_counter()
    _work(out, 0, 0, n)
    per = (time.perf_counter() - t0) / n
    return max(0, int(us * 1e-6 / per)) if us > 0 else 0


# ---- Ray shard actors ----------------------------------------------------------------------

def _numpy_work(outbox, me, window):
    """The trivial work of a Ray shard (numpy, not numba: the actors need no compile)."""
    outbox[:, 0] = window * 1000 + np.arange(len(outbox))
    outbox[:, 1] = me
    outbox[:, 4] = window
    return window * 1000


def _head(me: int, nxt: int, work_s: float) -> tuple[bytes, bytes, bytes]:
    stats = {"events": RECORDS, "busy_s": work_s, "cpu_s": work_s, "wait_s": 0.0,
             "windows": 1, "done_until": nxt, "left": False, "promises": 1, "wants": 0,
             "reached": nxt, "sent_min": {1 - me: nxt + 5}, "pushed": []}
    return heads.head(me, nxt, stats)


@ray.remote
class Shard:
    def __init__(self, me: int):
        self.me = me
        self.outbox = np.zeros((RECORDS, WIDTH), np.int64)
        self.inbox = np.zeros((RECORDS, WIDTH), np.int64)
        self.peer = None
        self.cond = threading.Condition()
        self.promise_in = -1
        self.got = None

    def ready(self) -> int:
        return self.me

    # -- driver calls per window (the driver hands the outboxes over)
    def step(self, window, limit, earliest, *injected):
        t0 = time.perf_counter()
        np.frombuffer(earliest, np.int64)
        for batch in injected:
            self.inbox[:] = batch
        nxt = _numpy_work(self.outbox, self.me, window)
        return _head(self.me, nxt, time.perf_counter() - t0), self.outbox

    # -- compiled graph: the step, then the peer's outbox into this shard
    def cg_step(self, window):
        t0 = time.perf_counter()
        _numpy_work(self.outbox, self.me, window)
        self.work_s = time.perf_counter() - t0
        return self.outbox

    def cg_take(self, batch):
        t0 = time.perf_counter()
        self.inbox[:] = batch
        return _head(self.me, int(batch[0, 0]), self.work_s + time.perf_counter() - t0)

    # -- pushes between the shards inside one call (a round's windows)
    def connect(self, peer) -> None:
        self.peer = peer

    def deliver(self, window, promise, batch) -> None:
        with self.cond:
            self.got = batch
            self.promise_in = max(self.promise_in, window)
            self.cond.notify()

    def run(self, windows: int) -> np.ndarray:
        """`windows` windows synchronised by pushes; per window (wall, work) in ns."""
        out = np.zeros((windows, 2), np.int64)
        pushes = []
        for w in range(windows):
            t0 = time.perf_counter_ns()
            nxt = _numpy_work(self.outbox, self.me, w)
            t1 = time.perf_counter_ns()
            with self.cond:
                pushes.append(self.peer.deliver.remote(w, nxt, self.outbox))
                while self.promise_in < w:
                    self.cond.wait()
                self.inbox[:] = self.got
            if len(pushes) > 64:
                done, pushes = ray.wait(pushes, num_returns=len(pushes), timeout=0)
                ray.get(done)
            out[w] = (time.perf_counter_ns() - t0, t1 - t0)
        ray.get(pushes)
        return out

    # -- the same pushes over a local link
    def link_address(self) -> str:
        # a frame's promise is its window (link_run), taken as `deliver` takes a push
        self.server = LinkServer(lambda src, seq, era, promise, batch, leaving:
                                 self.deliver(promise, promise, batch),
                                 lambda src, error: None, ENGINE_DTYPE)
        return self.server.address

    def link_connect(self, address) -> None:
        self.client = LinkClient(address, self.me)

    def link_run(self, windows: int) -> np.ndarray:
        """`windows` windows synchronised by pushes over the link; per window (wall, work)."""
        out = np.zeros((windows, 2), np.int64)
        batch = Batch(np.zeros(RECORDS, ENGINE_DTYPE))
        for w in range(windows):
            t0 = time.perf_counter_ns()
            _numpy_work(self.outbox, self.me, w)
            batch.msgs["time"] = self.outbox[:, 0]
            t1 = time.perf_counter_ns()
            self.client.push(w, 0, w, batch, -1)
            with self.cond:
                while self.promise_in < w:
                    self.cond.wait()
                self.inbox[:, 0] = self.got.msgs["time"]
            out[w] = (time.perf_counter_ns() - t0, t1 - t0)
        self.client.sync()
        return out


def _stats_us(sync_ns: np.ndarray) -> tuple[float, float]:
    us = np.asarray(sync_ns, np.float64)[WARMUP:] / 1e3
    return float(np.median(us)), float(np.percentile(us, 90))


def ray_calls(shards, windows: int) -> np.ndarray:
    """Per window: the driver's wall less the slower shard's work (ns)."""
    earliest = np.arange(2, dtype=np.int64).tobytes()
    sync = np.zeros(windows + WARMUP, np.int64)
    boxes = [(), ()]
    for w in range(windows + WARMUP):
        t0 = time.perf_counter_ns()
        got = ray.get([s.step.remote(w, w * 1000 + 1000, earliest, *boxes[1 - k])
                       for k, s in enumerate(shards)])
        fixed, _, _ = heads.read(heads.join([g[0] for g in got]))
        boxes = [(g[1],) for g in got]
        wall = time.perf_counter_ns() - t0
        sync[w] = wall - int(fixed["busy_s"].max() * 1e9)
    return sync


def ray_pushes(shards, windows: int) -> np.ndarray:
    a, b = shards
    ray.get([a.connect.remote(b), b.connect.remote(a)])
    got = ray.get([s.run.remote(windows + WARMUP) for s in shards])
    return got[0][:, 0] - got[0][:, 1]


def local_links(shards, windows: int) -> np.ndarray:
    a, b = shards
    addresses = ray.get([s.link_address.remote() for s in shards])
    ray.get([a.link_connect.remote(addresses[1]), b.link_connect.remote(addresses[0])])
    got = ray.get([s.link_run.remote(windows + WARMUP) for s in shards])
    return got[0][:, 0] - got[0][:, 1]


def compiled_graph(shards, windows: int, setup: dict | None = None) -> np.ndarray:
    """Per window: the driver's wall less the slower shard's work (ns); `setup` gets the
    seconds the graph took to compile and to tear down."""
    from ray.dag import InputNode, MultiOutputNode
    a, b = shards
    with InputNode() as window:
        out_a, out_b = a.cg_step.bind(window), b.cg_step.bind(window)
        dag = MultiOutputNode([a.cg_take.bind(out_b), b.cg_take.bind(out_a)])
    t0 = time.perf_counter()
    cdag = dag.experimental_compile()
    setup = {} if setup is None else setup
    setup["compile_s"] = time.perf_counter() - t0
    try:
        sync = np.zeros(windows + WARMUP, np.int64)
        for w in range(windows + WARMUP):
            t0 = time.perf_counter_ns()
            got = ray.get(cdag.execute(w))
            fixed, _, _ = heads.read(heads.join(got))
            sync[w] = time.perf_counter_ns() - t0 - int(fixed["busy_s"].max() * 1e9)
        return sync
    finally:
        t0 = time.perf_counter()
        cdag.teardown()
        setup["teardown_s"] = time.perf_counter() - t0


# ---- threads of one process -------------------------------------------------------------

def threads_barrier(windows: int, spins: int) -> tuple[np.ndarray, np.ndarray]:
    """Per window of thread 0: (sync, wall) in ns; sync = wall less its own work."""
    n = windows + WARMUP
    bufs = np.zeros((2, 2, RECORDS, WIDTH), np.int64)
    inbox = np.zeros((2, RECORDS, WIDTH), np.int64)
    nxt = np.zeros(2, np.int64)
    barrier = threading.Barrier(2)
    stamps = np.zeros((2, n + 1, 2), np.int64)

    def loop(me):
        peer = 1 - me
        for w in range(n):
            t0 = time.perf_counter_ns()
            nxt[me] = _work(bufs[w & 1, me], me, w, spins)
            stamps[me, w] = (t0, time.perf_counter_ns())
            barrier.wait()
            _take(inbox[me], bufs[w & 1, peer])
        stamps[me, n, 0] = time.perf_counter_ns()

    ts = [threading.Thread(target=loop, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = np.diff(stamps[0, :, 0])
    return wall - (stamps[0, :n, 1] - stamps[0, :n, 0]), wall


def threads_spin(windows: int, spins: int) -> tuple[np.ndarray, np.ndarray]:
    n = windows + WARMUP
    bufs = np.zeros((2, 2, RECORDS, WIDTH), np.int64)
    inbox = np.zeros((2, RECORDS, WIDTH), np.int64)
    flags = np.zeros(2, np.int64)
    nxt = np.zeros(2, np.int64)
    stamps = np.zeros((2, n, 3), np.int64)
    clocks = np.zeros((2, 2), np.int64)
    ts = [threading.Thread(target=_spin_loop, args=(k, bufs, inbox[k], flags, nxt, n, spins,
                                                     stamps[k], clocks[k])) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s = stamps[0]
    wall = np.append(np.diff(s[:, 0]), s[-1, 2] - s[-1, 0])
    return wall - (s[:, 1] - s[:, 0]), wall


def _work_alone_us(spins: int, windows: int) -> float:
    """The work kernel's median per window on one thread, nothing beside it (us)."""
    out = np.zeros((RECORDS, WIDTH), np.int64)
    ns = np.zeros(windows, np.int64)
    for w in range(windows):
        t0 = time.perf_counter_ns()
        _work(out, 0, w, spins)
        ns[w] = time.perf_counter_ns() - t0
    return float(np.median(ns)) / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=2, help="runs of every variant")
    ap.add_argument("--work-us", type=float, default=100.0,
                    help="the realistic work kernel's compute per window (threads)")
    add_json_option(ap, "sync_per_window.json")
    args = ap.parse_args()
    w = args.windows
    runs: dict[str, list] = {}
    loads = []

    def note(key: str, value: float) -> None:
        runs.setdefault(key, []).append(round(value, 2 if key.endswith("speedup") else 1))

    def report(name: str, sync_ns, wall_ns=None) -> None:
        med, p90 = _stats_us(sync_ns)
        load = os.getloadavg()[0]
        loads.append(load)
        note(f"{name}_median_us", med)
        note(f"{name}_p90_us", p90)
        line = f"{name:26s} sync per window: median {med:8.1f} us, p90 {p90:8.1f} us"
        if wall_ns is not None:
            wall = float(np.median(np.asarray(wall_ns)[WARMUP:])) / 1e3
            note(f"{name}_wall_us", wall)
            line += f", window wall median {wall:7.1f} us"
        print(f"{line}  (load {load:.2f})", flush=True)

    # threads first: no Ray processes competing for the two cores yet
    spins = _spins_for(args.work_us)
    for _ in range(args.runs):
        for name, fn in (("threads_barrier", threads_barrier), ("threads_spin", threads_spin)):
            fn(50, 0)                                         # compile, start
            report(name, *fn(w, 0))
            alone = _work_alone_us(spins, w)
            sync, wall = fn(w, spins)
            report(f"{name}_work", sync, wall)
            # both shards' work (each timed alone just before) over the window's wall:
            # 2 when the two threads fully overlap, 1 when they take turns
            note(f"{name}_work_alone_us", alone)
            note(f"{name}_work_speedup", 2 * alone / runs[f"{name}_work_wall_us"][-1])
            print(f"{name}: work alone {alone:.1f} us a window; two windows of work in one "
                  f"window's wall: {runs[f'{name}_work_speedup'][-1]:.2f}x", flush=True)

    errors = {}
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        for _ in range(args.runs):
            for name, fn in (("ray_calls", ray_calls), ("ray_pushes", ray_pushes),
                             ("local_links", local_links), ("compiled_graph", compiled_graph)):
                shards = [Shard.options(max_concurrency=2).remote(k) for k in range(2)]
                ray.get([s.ready.remote() for s in shards])
                setup: dict = {}
                try:
                    report(name, fn(shards, w, setup) if name == "compiled_graph"
                           else fn(shards, w))
                except Exception as e:  # noqa: BLE001 - the failure is a result to report
                    errors[f"{name}_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                    print(f"{name:26s} failed: {errors[f'{name}_error']}", flush=True)
                for key, sec in setup.items():
                    note(f"{name}_{key[:-2]}_ms", sec * 1e3)
                    print(f"{name:26s} {key[:-2]}: {sec * 1e3:.0f} ms", flush=True)
                for s in shards:
                    ray.kill(s)
    finally:
        ray.shutdown()
    figures: dict = {"windows": w, "outbox_bytes": RECORDS * WIDTH * 8, **runs, **errors,
                     "load_range": [round(min(loads), 2), round(max(loads), 2)]}
    if args.json:
        from report import write_record
        write_record(args.json, "bench_sync, K = 2 on one machine", figures)


if __name__ == "__main__":
    main()
