"""IP baselines for one source and a member set: IP multicast and naive unicast.

Both use the source's IP route tree (the predecessor row of its router), so every member's
route is the unicast route `path_links` gives. Loads are aggregated over the tree once
instead of walking each member's path: O(R * depth) per source for R routers, independent
of the number of members (plus O(M) for the members themselves).
"""
from __future__ import annotations

import numpy as np

from .errors import TopologyError
from .topology import Topology


def _route_depth(pred: np.ndarray, src: int) -> np.ndarray:
    """Hop count of every router's route from src (pred row of src); O(R * max depth)."""
    n = len(pred)
    depth = np.zeros(n, np.int64)
    cur = np.arange(n, dtype=np.int64)
    alive = cur != src
    while alive.any():
        depth += alive
        cur = np.where(alive, pred[np.where(alive, cur, src)], src).astype(np.int64)
        alive = cur != src
    return depth


def tree_link_loads(topo: Topology, source_host: int, member_hosts):
    """Per directed link, how many member routes from source_host use it.

    Returns (link_ids int64[] ascending, loads int64[]); LAN links included.
    """
    if not topo.has_paths:
        raise TopologyError(f"topology {topo.name!r} is a latency matrix: link-level "
                            "baselines are not available")
    s = int(source_host)
    members = np.asarray(member_hosts, np.int64).ravel()
    if not 0 <= s < topo.n_hosts or (members.size and (members.min() < 0
                                                       or members.max() >= topo.n_hosts)):
        raise TopologyError(f"host id outside 0..{topo.n_hosts - 1}")
    others = members[members != s]
    if not len(others):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    src_router = int(topo.host_router[s])
    pred = topo.routes.pred_row(src_router).astype(np.int64)
    depth = _route_depth(pred, src_router)
    acc = np.bincount(topo.host_router[others], minlength=topo.n_routers).astype(np.int64)
    for level in range(int(depth.max()), 0, -1):
        at = np.flatnonzero((depth == level) & (acc > 0))
        np.add.at(acc, pred[at], acc[at])
    used = np.flatnonzero((acc > 0) & (depth > 0))
    core_ids = topo.directed_link(pred[used], used)
    base = 2 * topo.n_edges
    down_hosts, down_counts = np.unique(others, return_counts=True)
    ids = np.concatenate([core_ids, [base + 2 * s], base + 2 * down_hosts + 1])
    loads = np.concatenate([acc[used], [len(others)], down_counts])
    order = np.argsort(ids)
    return ids[order].astype(np.int64), loads[order].astype(np.int64)


def ip_multicast(topo: Topology, source_host: int, member_hosts):
    """IP multicast: union of the unicast routes, each link carrying one copy.

    Returns (member_delay_us int64[M], link_ids int64[], link_counts int64[] all 1).
    """
    ids, _ = tree_link_loads(topo, source_host, member_hosts)
    members = np.asarray(member_hosts, np.int64).ravel()
    delays = topo.latency(np.full(len(members), int(source_host)), members)
    return delays, ids, np.ones(len(ids), np.int64)


def naive_unicast(topo: Topology, source_host: int, member_hosts):
    """Naive unicast: one copy per member along its unicast route.

    Returns (member_delay_us int64[M], link_ids int64[], link_counts int64[]).
    """
    ids, loads = tree_link_loads(topo, source_host, member_hosts)
    members = np.asarray(member_hosts, np.int64).ravel()
    delays = topo.latency(np.full(len(members), int(source_host)), members)
    return delays, ids, loads
