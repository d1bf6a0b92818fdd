"""Digest of a small Pastry run on the real ShardEngine: the guard of the protocol fast path.

The workload (in one process, :class:`emulator.local.LocalEmulator`): ``--nodes`` hosts of
a synthetic network join by the protocol (arrivals over 3 s, node 0 the contact of
joiners with no settled node, unbounded leaf refresh, keep-alives every second), 5% of
them crash mid-bootstrap and recover 4 s later (keep-alive timeouts, leaf-set and lazy
routing-table repair, per-hop acks, rejoins). The digest is a SHA-256 over

- the message log (every hop: time, arrival, type, src, dst, group), rows sorted;
- the route log (every delivered routed message), rows sorted;
- every node's final routing table, leaf set and neighbourhood set;
- the per-type sent / lost counters and the protocol counters (probes, repairs, ...).

Any change to a message, a decision or a log changes it. tests/test_protocol_digest.py
compares it with the digest of the numpy implementation the numba kernels replaced, for
one and two shards.

``--faithful``: the second workload, the faithful bootstrap's settings
(results/paper_zipf_1500_protocol: arrivals at 50/s with the nearest settled contact, no
keep-alives and so no hop acks, bounded leaf refresh, the row exchange of the second
join stage, routing-table maintenance, here every 3 s so that it runs), run until the
bootstrap ends by itself: the paths the keep-alive workload does not take (compiled
lookups and refresh timers). Its digest may also keep the logs in the order they were
written (``ordered``), which catches a send made in another order within a pass.

Usage: ``python benchmarks/protocol_digest.py [--nodes 600] [--shards 1] [--faithful]``.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.messages import MESSAGE_LOG_FIELDS, MSG_DTYPE  # noqa: E402
from actors.pastry.protocol import Pastry  # noqa: E402
from actors.pastry.synthetic import synthetic_network  # noqa: E402
from emulator.latency import RouterLatency  # noqa: E402
from emulator.local import LocalEmulator  # noqa: E402
from scenarios.config import protocol_params  # noqa: E402


def make_pastry(params: dict) -> Pastry:
    return Pastry(None, dict(params))


def run_workload(n_nodes: int = 600, shards: int = 1, seed: int = 3):
    """Run the workload; returns (LocalEmulator, seconds)."""
    net = synthetic_network(n_nodes, max(8, n_nodes // 10), seed, span_us=60_000)
    lat = RouterLatency(net["host_router"], net["router_dist_us"], net["lan_us"])
    # every setting that shapes the run is given (the digest must not follow the defaults)
    params, _ = protocol_params(n_nodes, seed, pastry={
        "bootstrap": "protocol", "join_rate_per_s": n_nodes / 3.0, "keepalive_us": 1_000_000,
        "join_settle_us": 1_000_000, "leaf_refresh_us": 1_000_000, "leaf_refresh_rounds": 0,
        "join_contact_fallback": "first", "join_exchange_rows": 2, "table_maintenance_us": 0})
    emu = LocalEmulator(lat, functools.partial(make_pastry, params), shards=shards,
                        seed=seed, shared=net, message_dtype=MSG_DTYPE,
                        message_log_fields=MESSAGE_LOG_FIELDS)
    rng = np.random.default_rng(seed + 1)
    crash = np.sort(rng.choice(np.arange(1, n_nodes), size=max(1, n_nodes // 20),
                               replace=False))
    t0 = time.perf_counter()
    emu.fail(crash, 2_500_000)
    emu.recover(crash, 6_500_000)
    emu.run("bootstrap", until=12_000_000)
    return emu, time.perf_counter() - t0


def run_faithful(n_nodes: int = 300, shards: int = 1, seed: int = 5):
    """The faithful-bootstrap workload (module docstring); returns (LocalEmulator, s)."""
    net = synthetic_network(n_nodes, max(8, n_nodes // 10), seed, span_us=60_000)
    lat = RouterLatency(net["host_router"], net["router_dist_us"], net["lan_us"])
    params, _ = protocol_params(n_nodes, seed, pastry={
        "bootstrap": "protocol", "join_rate_per_s": 50.0, "join_contact_fallback": "nearest",
        "keepalive_us": 0, "leaf_refresh_us": 2_000_000, "leaf_refresh_rounds": 5,
        "table_maintenance_us": 3_000_000, "join_exchange_rows": 8})
    emu = LocalEmulator(lat, functools.partial(make_pastry, params), shards=shards,
                        seed=seed, shared=net, message_dtype=MSG_DTYPE,
                        message_log_fields=MESSAGE_LOG_FIELDS)
    t0 = time.perf_counter()
    emu.run("bootstrap")
    return emu, time.perf_counter() - t0


def _table_digest(h, tables: list[pa.Table], ordered: bool = False) -> int:
    tables = [t for t in tables if t is not None and t.num_rows]
    if not tables:
        h.update(b"empty")
        return 0
    t = pa.concat_tables(tables)
    cols = [c for c in t.column_names if c != "phase"]
    arrs = [np.asarray(t.column(c).to_numpy()) for c in cols]
    order = np.arange(t.num_rows) if ordered else np.lexsort(arrs[::-1])
    for c, a in zip(cols, arrs, strict=True):
        h.update(c.encode())
        h.update(np.ascontiguousarray(a[order]).tobytes())
    return t.num_rows


def digest(emu: LocalEmulator, ordered: bool = False) -> tuple[str, dict]:
    """(hex digest, row counts) of the run's logs, final state and counters. ``ordered``:
    log rows in the order they were written (shard by shard), not sorted."""
    h = hashlib.sha256()
    logs = [e.take_logs() for e in emu.engines]
    rows = {}
    for name in ("message", "route"):
        rows[name] = _table_digest(h, [lg.get(name) for lg in logs], ordered)
    n = emu.n_nodes
    parts = emu.call("export_state")
    for key in ("rt", "leaf", "nbr"):
        first = parts[0][1][key]
        full = np.full((n,) + first.shape[1:], -2, first.dtype)
        for nodes, st in parts:
            full[nodes] = st[key]
        h.update(key.encode())
        h.update(full.tobytes())
    counters = {}
    for e in emu.engines:
        c = e.counters()
        for group in ("sent_by_type", "lost_by_type", "counts"):
            for k, v in c[group].items():
                key = f"{group}.{k}"
                counters[key] = counters.get(key, 0) + int(v)
    for k in sorted(counters):
        h.update(f"{k}={counters[k]};".encode())
    rows["counters"] = counters
    return h.hexdigest(), rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=600)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--seed", type=int, default=None, help="3 (5 with --faithful)")
    ap.add_argument("--faithful", action="store_true", help="the faithful-bootstrap workload")
    ap.add_argument("--ordered", action="store_true", help="logs in written order")
    a = ap.parse_args()
    if a.faithful:
        a.seed = 5 if a.seed is None else a.seed
        emu, secs = run_faithful(a.nodes, a.shards, a.seed)
    else:
        a.seed = 3 if a.seed is None else a.seed
        emu, secs = run_workload(a.nodes, a.shards, a.seed)
    d, rows = digest(emu, a.ordered)
    print(f"nodes={a.nodes} shards={a.shards} seed={a.seed} wall={secs:.2f}s "
          f"messages={rows['message']} routes={rows['route']}")
    print(f"counters={rows['counters']}")
    print(f"digest={d}")


if __name__ == "__main__":
    main()
