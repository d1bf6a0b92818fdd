"""Per-message cost of the Pastry handlers on the real engine, by batch size.

One ``ShardEngine`` in this process holds ``--nodes`` nodes of a synthetic network with
the oracle's exact Pastry state (one shard: every node is local). For each main message
type and each cell size k (10, 100, 1,000, 10,000 messages) a batch of k messages of that
type to random nodes is handed to the engine's dispatch -- the cell's sort, the handler,
the kernels, the messages it sends (stamped, logged, queued) -- and timed; the queue and
logs are emptied between repetitions. Messages/s per shard = k / CPU time per batch
(process time: on a shared machine wall time mostly measures the other jobs). The
state evolves as the handlers run (announced nodes enter tables), the same for any code
version, so two versions do the same work.

Types: ``route`` (a routed application message's routing step, forwarded or delivered),
``join`` (a JOIN's routing step: the hop sends its rows, the root its leaf set),
``announce``, ``leaf_reply``, ``join_rows``, ``keepalive``, ``rows_req``, ``rows_reply``.

With ``--stack scribe`` the engine runs the product's stack (Pastry with Scribe) over
``GROUPS`` groups, created by their creators' CREATE requests before any timing, and the
type ``mcast`` is Scribe's MCAST routed from one of ``SOURCES`` sources (each has published
to its group once, so it holds the group's slot, as a source in a run does) to its group's
rendezvous point: the routing step of an application message as a run has it (Pastry's
hop, Scribe's forward upcall on the way, the deliver upcall and the RP_ADDR reply at the
RP). ``route`` is Pastry alone's: its type (60) has no application there, and in the
product's stack it is Scribe's CREATE.

With ``--loop`` the batch is a cell of the engine's window instead, 100 copies in
consecutive grid cells of one window run by ``ShardEngine.advance``, so the stack's
compiled cell loop takes them (the engine's determinism rules, the handlers and the
routing of the sends, as in a run) unless a type has no compiled handler; messages/s
counts every message the window processed (the sends that fall due in it too), and the
table gives the share the Python loop took at each size. (A cell of more than
``emulator.kernels.SORT_MAX`` messages -- 10,000 a cell plus the hops that fall due in
it -- always goes to the Python loop, and the few cells after it too.)

Usage: ``python benchmarks/bench_protocol.py [--nodes 10000] [--loop] [--stack scribe]
[--types mcast ...] [--src CHECKOUT]``
(``--src``: import emulator/ and actors/ from another checkout, e.g. the code before).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from report import add_json_option

SIZES = (10, 100, 1_000, 10_000)
CELLS_PER_WINDOW = 100     # (--loop) cells of a batch in one window of the engine
TYPES = ("route", "join", "announce", "leaf_reply", "join_rows", "keepalive", "rows_req",
         "rows_reply")
SCRIBE_TYPES = ("mcast",)   # (--stack scribe)
GROUPS = 100                # (--stack scribe) groups, their RPs spread over the nodes
CREATE_US = 2_000_000       # (--stack scribe) virtual time the CREATEs (then the first
                            # multicasts) get to reach the RPs
SOURCES = 5_000             # (--stack scribe) (source, group) pairs the MCASTs come from


def stack_record():
    """(message record, ShardEngine keywords) of the checkout being measured: the stack's
    own record, or for code from before the protocols declared their columns (``--src``)
    the engine's MSG_DTYPE, which the engine then took for granted."""
    try:
        from actors.messages import MSG_DTYPE
    except ImportError:
        from emulator.batch import MSG_DTYPE
        return MSG_DTYPE, {}
    return MSG_DTYPE, {"message_dtype": MSG_DTYPE}


def build(nodes: int, seed: int, stack: str = "pastry"):
    """(engine, shared network) of one shard holding every node, Pastry's state the
    oracle's; ``stack`` "scribe": the product's stack, its groups created and its sources'
    (nodes, groups) in ``net["sources"]`` (module docstring)."""
    import functools

    import numpy as np

    from actors.pastry.protocol import Pastry
    from actors.pastry.synthetic import synthetic_network
    from emulator.engine import ShardEngine
    from emulator.latency import RouterLatency
    from scenarios.config import protocol_params

    net = synthetic_network(nodes, max(8, nodes // 20), seed, span_us=60_000)
    lat = RouterLatency(net["host_router"], net["router_dist_us"], net["lan_us"])
    params, scribe_params = protocol_params(nodes, seed, pastry={"bootstrap": "oracle"})
    if stack == "scribe":
        from actors.scribe import create_requests, group_table, multicast_requests
        from actors.stack import make_stack

        rng = np.random.default_rng(seed)
        credentials = rng.integers(1, 10**9, GROUPS)
        creators = rng.integers(0, nodes, GROUPS)
        net["groups"] = group_table([f"bench{g}" for g in range(GROUPS)],
                                    [f"node{c}" for c in creators], credentials)
        factory = functools.partial(make_stack, params, scribe_params)
    else:
        factory = functools.partial(Pastry, None, params)
    eng = ShardEngine(0, np.zeros(nodes, np.int32), lat, factory, seed=seed,
                      delta_us=lat.min_latency_us(), shared=net, **stack_record()[1])
    if stack == "scribe":   # the groups exist at their RPs before any timing
        eng.advance((CREATE_US // eng.delta_us) * eng.delta_us, "bench",
                    [create_requests(creators, np.arange(GROUPS), 0, credentials)])
        # the sources publish once, so each holds its group's slot (where the RP's
        # RP_ADDR answer is kept) as a source does in a run
        src, grp = rng.integers(0, nodes, SOURCES), rng.integers(0, GROUPS, SOURCES)
        t = eng.now + eng.delta_us
        eng.advance(((t + CREATE_US) // eng.delta_us) * eng.delta_us, "bench",
                    [multicast_requests(src, grp, t, credentials[grp])])
        net["sources"] = src, grp
    return eng, net


def make_batch(kind: str, k: int, eng, net, rng):
    import numpy as np

    from actors.pastry import types as msg_types
    from emulator.batch import Batch, pack_rows

    MSG_DTYPE = stack_record()[0]

    st = getattr(eng.stack, "pastry", eng.stack).nodes.tables()  # (the stack's Pastry)
    n = eng.n_nodes
    m = np.zeros(k, MSG_DTYPE)
    dst = rng.integers(0, n, k)
    src = rng.integers(0, n, k)
    m["time"] = m["sent"] = eng.now
    m["group"] = -1
    m["seq"] = np.arange(k)
    payload = None
    if kind == "mcast":    # a source's MCAST, routed to its group's RP
        from actors.scribe.types import MCAST, Mcast

        pick = rng.integers(0, len(net["sources"][0]), k)
        src, g = net["sources"][0][pick], net["sources"][1][pick]
        m["src"] = m["dst"] = m["origin"] = src
        m["mode"], m["type"], m["group"] = 1, MCAST, g
        m["key_hi"], m["key_lo"] = net["groups"]["id_hi"][g], net["groups"]["id_lo"][g]
        m[Mcast.credential] = net["groups"]["credential"][g]
        m[Mcast.seqno] = np.arange(k)
        m[Mcast.publish_time] = eng.now
        return Batch(m)
    if kind in ("route", "join"):
        m["src"] = m["dst"] = dst
        m["mode"] = 1
        x = rng.integers(0, n, k)
        if kind == "route":
            m["type"] = 60
            m["key_hi"] = rng.integers(0, 2**63, k, dtype=np.uint64) * np.uint64(2)
            m["key_lo"] = rng.integers(0, 2**63, k, dtype=np.uint64)
            m["origin"] = dst
        else:
            m["type"] = msg_types.JOIN
            m["key_hi"], m["key_lo"] = net["node_ids_hi"][x], net["node_ids_lo"][x]
            m["origin"] = m[msg_types.Join.joiner] = x
        return Batch(m)
    m["dst"] = dst
    if kind == "keepalive":  # from a member of the receiver's leaf set
        leaf = st.leaf[dst]
        m["src"] = np.where(leaf[:, 0] >= 0, leaf[:, 0], src)
        m["type"] = msg_types.KEEPALIVE
        return Batch(m)
    m["src"] = src
    if kind == "announce":
        m["type"], m[msg_types.Announce.announcer] = msg_types.ANNOUNCE, src
    elif kind == "rows_req":
        m["type"], m[msg_types.RowsReq.row] = msg_types.ROWS_REQ, rng.integers(0, 2, k)
    elif kind == "leaf_reply":
        m["type"] = msg_types.LEAF_REPLY
        payload = pack_rows(np.concatenate([st.leaf[src], src[:, None]], axis=1))
    elif kind == "join_rows":
        m["type"] = msg_types.JOIN_ROWS
        payload = pack_rows(st.rt[src, :2].reshape(k, -1))
    elif kind == "rows_reply":
        m["type"], m[msg_types.RowsReply.row] = msg_types.ROWS_REPLY, 1
        payload = pack_rows(st.rt[src, 1])
    if payload is None:
        return Batch(m)
    m["pay_off"], m["pay_len"] = payload["pay_off"], payload["pay_len"]
    return Batch(m, payload["payload"])


def time_cell(eng, batch, min_s: float) -> float:
    """CPU seconds per dispatch of ``batch`` (median of >= 3 repetitions, >= min_s in all)."""
    from emulator.logs import LogBuffer

    times = []
    total = 0.0
    while len(times) < 3 or total < min_s:
        eng.queue.clear()
        eng.logs = LogBuffer()
        t0 = time.process_time()  # CPU time: the machine is shared, wall time is noise
        eng._dispatch(batch)
        eng._flush()     # the pass's sends are stamped, logged and queued when it ends
        dt = time.process_time() - t0
        times.append(dt)
        total += dt
        if len(times) >= 200:
            break
    eng.queue.clear()
    return sorted(times)[len(times) // 2]


def time_loop_cells(eng, batch, min_s: float) -> tuple[float, float]:
    """(messages per CPU second of the engine's window loop -- the stack's compiled cell
    loop where it takes the types -- on cells of ``batch``, the share of the messages the
    Python loop took). Each repetition queues ``CELLS_PER_WINDOW`` copies of the batch in
    consecutive grid cells after the last one run and advances to the end of the last, so
    a window holds many cells, as in a run; the messages the handlers send that fall due
    inside that window run too, and count (every message the engine processed). Median of
    >= 3 repetitions, >= min_s in all."""
    from emulator.logs import LogBuffer

    d = eng.delta_us
    rates = []
    total = 0.0
    python = events = 0
    while len(rates) < 3 or total < min_s:
        eng.queue.clear()
        eng.logs = LogBuffer()
        t = (max(eng.now, eng.done_until) // d + 1) * d
        cells = []
        for c in range(CELLS_PER_WINDOW):
            m = batch.msgs.copy()
            m["time"] = m["sent"] = t + c * d
            m["seq"] += c * len(m)
            cells.append(type(batch)(m, batch.payload))
        before = eng.python_events
        t0 = time.process_time()  # CPU time: the machine is shared, wall time is noise
        _, _, stats = eng.advance(t + CELLS_PER_WINDOW * d, "bench", cells)
        dt = time.process_time() - t0
        python += eng.python_events - before
        events += stats["events"]
        rates.append(stats["events"] / dt)
        total += dt
        if len(rates) >= 50:
            break
    eng.queue.clear()
    return sorted(rates)[len(rates) // 2], python / max(events, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-s", type=float, default=0.3, help="time spent per cell at least")
    ap.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1])
    add_json_option(ap, "protocol_cells.json", "the table")
    ap.add_argument("--stack", choices=("pastry", "scribe"), default="pastry",
                    help="Pastry alone, or the product's stack with groups (type mcast)")
    ap.add_argument("--types", nargs="*", default=None,
                    help=f"default: {' '.join(TYPES)} (with --stack scribe: "
                         f"{' '.join(SCRIBE_TYPES)}, then the others but route)")
    ap.add_argument("--loop", action="store_true",
                    help="run each cell through the engine's window loop (the compiled "
                         "cell loop) instead of the Python dispatch")
    a = ap.parse_args()
    sys.path.insert(0, str(a.src.resolve()))
    import numpy as np

    t0 = time.perf_counter()
    types = TYPES if a.stack == "pastry" else (*SCRIBE_TYPES, *TYPES[1:])
    if a.types is None:
        a.types = list(types)
    unknown = [t for t in a.types if t not in types]
    if unknown:
        ap.error(f"--types: {' '.join(unknown)}: not a type of the {a.stack} stack "
                 f"({' '.join(types)})")
    eng, net = build(a.nodes, a.seed, a.stack)
    setup = time.perf_counter() - t0
    rng = np.random.default_rng(a.seed)
    print(f"src={a.src} stack={a.stack} nodes={a.nodes} setup {setup:.1f} s, "
          f"load {os.getloadavg()[0]:.1f}")
    how = "the window loop" if a.loop else "the Python dispatch"
    print(f"{'type':12s}" + "".join(f"{k:>12,}" for k in SIZES)
          + f"   (messages/s, one shard, by {how})")
    out = {}
    python = {}
    for kind in a.types:
        # warm-up: compile / cache-load kernels outside the timing
        if a.loop:
            time_loop_cells(eng, make_batch(kind, 10, eng, net, rng), 0.0)
        else:
            eng._dispatch(make_batch(kind, 10, eng, net, rng))
        row = {}
        for k in SIZES:
            b = make_batch(kind, k, eng, net, rng)
            if a.loop:
                row[k], python[f"{kind}_{k}"] = time_loop_cells(eng, b, a.min_s)
            else:
                row[k] = k / time_cell(eng, b, a.min_s)
        out[kind] = row
        share = ""
        if a.loop:
            share = "   (by the Python loop: " \
                + " / ".join(f"{python[f'{kind}_{k}']:.0%}" for k in SIZES) + ")"
        print(f"{kind:12s}" + "".join(f"{row[k]:>12,.0f}" for k in SIZES) + share, flush=True)
    if a.json:
        from report import write_record
        figures = {f"{kind}_{k}": rate for kind, row in out.items() for k, rate in row.items()}
        figures.update({f"python_share_{key}": v for key, v in python.items()})
        write_record(a.json, f"bench_protocol, {a.nodes:,} nodes",
                     {**figures, "nodes": a.nodes, "src": str(a.src), "loop": a.loop,
                      "stack": a.stack})


if __name__ == "__main__":
    main()
