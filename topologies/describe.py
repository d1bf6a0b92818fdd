"""Summary statistics of a topology (what `topology inspect` prints)."""
from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from .graph import EDGE_CLASS_NAMES


def describe_topology(topo, sample_sources: int = 256, seed: int = 0) -> dict:
    """Routers, links by class, degree, link delay, diameters, mean host-to-host delay,
    fraction of policy routes longer than the min-delay route.

    Route statistics are exact over all router pairs when the routing tables are dense;
    on larger maps they use `sample_sources` random source routers (said in the result).
    Cost: dense O(R^2) plus one min-delay and one hop all-pairs run (or per sampled source).
    """
    g = topo.graph
    n = g.n_routers
    out = {"name": g.name, "routers": n, "hosts": topo.n_hosts, "has_paths": topo.has_paths,
           "transit_routers": int(g.router_is_transit.sum()),
           "domains": len(np.unique(g.router_domain)),
           "core_edges": g.n_edges, "directed_links": topo.n_links,
           "links_by_class": {EDGE_CLASS_NAMES[c]: int(k) for c, k in
                              zip(*np.unique(g.edge_class, return_counts=True), strict=True)},
           "lan_us": topo.lan_us, "min_latency_us": int(topo.min_latency_us)}
    if g.n_edges:
        out["mean_degree"] = 2 * g.n_edges / n
        out["mean_link_delay_ms"] = float(g.edge_delay_us.mean() / 1000)
        out["mean_link_delay_ms_by_class"] = {
            EDGE_CLASS_NAMES[c]: float(g.edge_delay_us[g.edge_class == c].mean() / 1000)
            for c in np.unique(g.edge_class)}
    if topo.is_dense:
        sources = np.arange(n)
        out["route_stats"] = "all pairs"
    else:
        rng = np.random.default_rng(seed)
        sources = np.sort(rng.choice(n, size=min(sample_sources, n), replace=False))
        out["route_stats"] = f"{len(sources)} sampled source routers"
    if g.n_edges and topo.has_paths:
        w = np.concatenate([g.edge_delay_us, g.edge_delay_us]).astype(np.float64)
        rows = np.concatenate([g.edge_src, g.edge_dst])
        cols = np.concatenate([g.edge_dst, g.edge_src])
        delay_mat = csr_matrix((w, (rows, cols)), shape=(n, n))
        hop_mat = csr_matrix((np.ones_like(w), (rows, cols)), shape=(n, n))
        max_delay = max_hops = 0
        longer = total = 0
        stretch_sum = 0.0
        for lo in range(0, len(sources), 256):
            src = sources[lo:lo + 256]
            pol = np.stack([topo.routes.dist_row(s) for s in src]).astype(np.int64)
            mind = np.rint(dijkstra(delay_mat, indices=src)).astype(np.int64)
            hops = dijkstra(hop_mat, indices=src, unweighted=True)
            max_delay = max(max_delay, int(pol.max()))
            max_hops = max(max_hops, int(hops.max()))
            off = pol > 0
            longer += int((pol[off] > mind[off]).sum())
            total += int(off.sum())
            stretch_sum += float((pol[off] / mind[off]).sum())
        out["diameter_delay_ms"] = max_delay / 1000
        out["diameter_hops"] = max_hops
        out["policy_routes_longer_than_min_delay"] = longer / max(total, 1)
        out["mean_policy_stretch"] = stretch_sum / max(total, 1)
    elif not topo.has_paths:
        out["diameter_delay_ms"] = float(topo.routes.dist.max() / 1000)
    out["mean_router_delay_ms"] = _mean_router_delay(topo, sources) / 1000
    if topo.n_hosts >= 2:
        out["mean_host_delay_ms"] = _mean_host_delay(topo) / 1000
    return out


def _mean_router_delay(topo, sources) -> float:
    total = count = 0.0
    for s in sources:
        row = topo.routes.dist_row(s).astype(np.float64)
        total += row.sum()
        count += len(row) - 1
    return total / max(count, 1)


def _mean_host_delay(topo) -> float:
    """Mean over ordered pairs of distinct hosts: (c^T D c + 2 lan N(N-1)) / N(N-1), c =
    hosts per router. Exact on dense tables (O(R^2)); lazy: over occupied source routers."""
    c = np.bincount(topo.host_router, minlength=topo.n_routers).astype(np.float64)
    n_h = topo.n_hosts
    occupied = np.flatnonzero(c)
    if not topo.is_dense and len(occupied) > 2048:
        occupied = np.random.default_rng(0).choice(occupied, 2048, replace=False)
        scale = c.sum() / c[occupied].sum()
    else:
        scale = 1.0
    core = sum(c[s] * float(topo.routes.dist_row(s).astype(np.float64) @ c) for s in occupied)
    pairs = n_h * (n_h - 1)
    return (core * scale) / pairs + 2 * topo.lan_us
