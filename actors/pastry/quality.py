"""Quality of Pastry tables against the oracle (SPEC 2): fraction of routing-table entries
that are the closest possible choice, and the delay stretch of routes.

The scenario gathers every shard's state (``Pastry.export_state`` through ``emu.call``),
stacks it into one :class:`PastryState` indexed by global node id, and calls
:func:`table_quality`.
"""

from __future__ import annotations

import numpy as np

from emulator.latency import RouterLatency

from .ids import closest_node, sorted_order
from .oracle import oracle_state
from .routing import next_hop
from .state import PastryState


def stack_states(parts, n_nodes: int) -> PastryState:
    """One global state from ``[(nodes, state_dict), ...]`` (one entry per shard)."""
    first = parts[0][1]
    rt = np.full((n_nodes,) + first["rt"].shape[1:], -1, np.int32)
    leaf = np.full((n_nodes, first["leaf"].shape[1]), -1, np.int32)
    nbr = np.full((n_nodes, first["nbr"].shape[1]), -1, np.int32)
    for nodes, d in parts:
        rt[nodes], leaf[nodes], nbr[nodes] = d["rt"], d["leaf"], d["nbr"]
    return PastryState(rt=rt, leaf=leaf, nbr=nbr, b=int(first["b"]))


def route_paths(state: PastryState, ids_hi, ids_lo, start, key_hi, key_lo, max_hops=64,
                on_loop="raise"):
    """Route every (start, key) with :func:`next_hop` on a global state.

    Returns (final node, hops, per-hop node matrix int64[B, max_hops+1] -1 padded).
    A route longer than ``max_hops`` is a loop (inconsistent leaf sets): ``on_loop="raise"``
    raises RuntimeError; ``"mark"`` gives it final = -1 and hops = max_hops.
    O(B * hops * l).
    """
    if on_loop not in ("raise", "mark"):
        raise ValueError(f"route_paths: on_loop must be 'raise' or 'mark', got {on_loop!r}")
    cur = np.asarray(start, np.int64).copy()
    path = np.full((len(cur), max_hops + 1), -1, np.int64)
    path[:, 0] = cur
    hops = np.zeros(len(cur), np.int64)
    final = np.full(len(cur), -1, np.int64)
    active = np.arange(len(cur))
    for h in range(max_hops):
        nx, _ = next_hop(state, cur[active], cur[active], key_hi[active], key_lo[active],
                         ids_hi, ids_lo)
        stop = nx < 0
        final[active[stop]] = cur[active[stop]]
        active = active[~stop]
        cur[active] = nx[~stop]
        hops[active] += 1
        path[active, h + 1] = cur[active]
        if not len(active):
            return final, hops, path
    if on_loop == "mark":
        return final, hops, path
    raise RuntimeError(f"route_paths: routes longer than {max_hops} hops (routing loop)")


def table_quality(state: PastryState, ids_hi, ids_lo, host_router, router_dist_us, lan_us,
                  *, n_routes=2000, seed=0, oracle: PastryState | None = None) -> dict:
    """Compare a global state with the oracle's exact PNS state.

    ``fraction_optimal``: routing-table entries equal to the oracle's entry, over the
    oracle's non-empty entries; ``filled``: entries set over the oracle's non-empty ones;
    ``stretch_mean`` / ``stretch_median``: overlay route delay / direct delay for
    ``n_routes`` random (node, key) routes (root != origin); ``correct``: fraction of
    routes ending at the node numerically closest to the key; ``hops_mean``;
    ``looping_routes``: fraction of routes still going after 64 hops (a routing loop on
    inconsistent leaf sets; counted as incorrect, left out of stretch and hops);
    ``leaf_sets_exact``: fraction of nodes whose leaf set is the oracle's (the true l/2 + l/2
    numerically closest nodes).
    Cost: one oracle computation plus O(n_routes * hops).
    """
    n = len(ids_hi)
    if oracle is None:
        oracle = oracle_state(np.arange(n), ids_hi, ids_lo, host_router, router_dist_us,
                              lan_us, b=state.b, l=state.l, m=state.nbr.shape[1])
    ref = oracle.rt >= 0
    frac = float(((state.rt == oracle.rt) & ref).sum() / max(ref.sum(), 1))
    filled = float(((state.rt >= 0) & ref).sum() / max(ref.sum(), 1))
    rng = np.random.default_rng(seed)
    start = rng.integers(0, n, n_routes)
    kh = rng.integers(0, 2**64, n_routes, dtype=np.uint64)
    kl = rng.integers(0, 2**64, n_routes, dtype=np.uint64)
    final, hops, path = route_paths(state, ids_hi, ids_lo, start, kh, kl, on_loop="mark")
    ok = final >= 0
    lan = int(np.asarray(lan_us).flat[0]) if np.ndim(lan_us) else int(lan_us)
    lat = RouterLatency(host_router, router_dist_us, lan).latency

    a, b = path[:, :-1], path[:, 1:]
    step = np.where(b >= 0, lat(np.maximum(a, 0), np.maximum(b, 0)), 0)
    delay = step.sum(axis=1)
    order = sorted_order(ids_hi, ids_lo)
    root = closest_node(ids_hi[order], ids_lo[order], order, kh, kl)
    away = (root != start) & ok
    stretch = delay[away] / lat(start[away], root[away])
    return {"fraction_optimal": frac, "filled": filled,
            "leaf_sets_exact": float((state.leaf == oracle.leaf).all(axis=1).mean()),
            "stretch_mean": float(stretch.mean()) if len(stretch) else 1.0,
            "stretch_median": float(np.median(stretch)) if len(stretch) else 1.0,
            "correct": float((final == root).mean()),
            "hops_mean": float(hops[ok].mean()) if ok.any() else 0.0,
            "looping_routes": float((~ok).mean())}
