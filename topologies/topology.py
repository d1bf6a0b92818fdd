"""`Topology`: a router graph with end hosts attached, its IP routes and latencies.

Directed link ids (ARCHITECTURE.md): core edge e gives 2e (edge_src -> edge_dst) and 2e+1
(reverse); host h gives LAN uplink 2E + 2h and downlink 2E + 2h + 1.
"""
from __future__ import annotations

import json
import os
import uuid
from functools import cached_property
from pathlib import Path

import numpy as np

from .errors import TopologyError
from .graph import RouterGraph
from .routing import DENSE_MAX_ROUTERS, DenseRoutes, LazyRoutes, MatrixRoutes

_FORMAT = 1


class Topology:
    """Core routers + end hosts. Routing tables are built on first use (or loaded)."""

    def __init__(self, graph: RouterGraph, host_router, lan_us: int = 1000,
                 site_latency_us: np.ndarray | None = None, dense_limit: int = DENSE_MAX_ROUTERS):
        self.graph = graph
        self.host_router = np.asarray(host_router, np.int32).ravel()
        if len(self.host_router) and (self.host_router.min() < 0
                                      or self.host_router.max() >= graph.n_routers):
            raise TopologyError(f"host_router outside 0..{graph.n_routers - 1}")
        self.lan_us = int(lan_us)
        if self.lan_us < 1:
            raise TopologyError(f"lan_us must be >= 1 us, got {self.lan_us}")
        self.dense_limit = int(dense_limit)
        self._routes = None
        if site_latency_us is not None:
            m = np.asarray(site_latency_us)
            if m.shape != (graph.n_routers, graph.n_routers):
                raise TopologyError(f"latency matrix shape {m.shape} does not match "
                                    f"{graph.n_routers} sites")
            self._routes = MatrixRoutes(m)
        self._link_keys = None

    # ---- construction -------------------------------------------------------------
    @classmethod
    def from_edges(cls, n_routers, src, dst, delay_us, host_router, policy_weight=None,
                   lan_us=1000, **graph_fields) -> Topology:
        """A topology from an explicit undirected edge list (delays in us)."""
        g = RouterGraph(n_routers, src, dst, delay_us, edge_policy=policy_weight,
                        **graph_fields)
        return cls(g, host_router, lan_us=lan_us)

    @classmethod
    def from_latency_matrix(cls, site_latency_us, host_router, lan_us=1000, name="matrix",
                            meta=None) -> Topology:
        """Sites with a measured one-way latency matrix (us) and no paths (has_paths False)."""
        m = np.asarray(site_latency_us)
        n = m.shape[0]
        g = RouterGraph(n, np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0),
                        name=name, meta=dict(meta or {}))
        return cls(g, host_router, lan_us=lan_us, site_latency_us=m)

    def with_hosts(self, host_router, lan_us=None) -> Topology:
        """Same core (routing tables shared), other hosts."""
        t = Topology.__new__(Topology)
        t.graph, t._routes, t._link_keys = self.graph, self._routes, self._link_keys
        t.dense_limit = self.dense_limit
        t.lan_us = self.lan_us if lan_us is None else int(lan_us)
        t.host_router = np.asarray(host_router, np.int32).ravel()
        if len(t.host_router) and (t.host_router.min() < 0
                                   or t.host_router.max() >= self.n_routers):
            raise TopologyError(f"host_router outside 0..{self.n_routers - 1}")
        return t

    # ---- plain attributes ---------------------------------------------------------
    n_hosts = property(lambda self: len(self.host_router))
    n_routers = property(lambda self: self.graph.n_routers)
    n_edges = property(lambda self: self.graph.n_edges)
    edge_src = property(lambda self: self.graph.edge_src)
    edge_dst = property(lambda self: self.graph.edge_dst)
    edge_delay_us = property(lambda self: self.graph.edge_delay_us)
    edge_policy = property(lambda self: self.graph.edge_policy)
    edge_class = property(lambda self: self.graph.edge_class)
    router_domain = property(lambda self: self.graph.router_domain)
    router_is_transit = property(lambda self: self.graph.router_is_transit)
    router_region = property(lambda self: self.graph.router_region)
    name = property(lambda self: self.graph.name)

    @property
    def has_paths(self) -> bool:
        return not isinstance(self._routes, MatrixRoutes)

    @property
    def n_links(self) -> int:
        return 2 * self.n_edges + 2 * self.n_hosts

    @property
    def routes(self):
        """The routing-table object (built on first use)."""
        if self._routes is None:
            g = self.graph
            cls = DenseRoutes if g.n_routers <= self.dense_limit else LazyRoutes
            self._routes = cls(g.n_routers, g.edge_src, g.edge_dst, g.edge_delay_us,
                               g.edge_policy)
        return self._routes

    @property
    def is_dense(self) -> bool:
        return self.routes.kind in ("dense", "matrix")

    # ---- latencies ----------------------------------------------------------------
    def router_dist_us(self, src_routers, dst_routers) -> np.ndarray:
        """Core delay (us, int64) of the IP route between routers; vectorized, broadcasting."""
        a = np.asarray(src_routers, np.int64)
        b = np.asarray(dst_routers, np.int64)
        return self.routes.dist_us(a, b)

    def latency(self, src_hosts, dst_hosts) -> np.ndarray:
        """One-way host-to-host delay (us, int64) = lan + core + lan; 0 for the same host."""
        a = np.asarray(src_hosts, np.int64)
        b = np.asarray(dst_hosts, np.int64)
        if a.size and (min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= self.n_hosts):
            raise TopologyError(f"host id outside 0..{self.n_hosts - 1}")
        out = self.routes.dist_us(self.host_router[a], self.host_router[b]) + 2 * self.lan_us
        return np.where(a == b, 0, out)

    def dist_matrix(self) -> np.ndarray:
        """Dense int32 router-to-router route delays (us); TopologyError on a too-large map."""
        if not self.is_dense:
            raise TopologyError(f"{self.n_routers} routers: no dense distance matrix "
                                f"(limit {self.dense_limit}); use router_dist_us")
        return self.routes.dist

    @cached_property
    def min_latency_us(self) -> int:
        """Smallest latency between two distinct hosts; O(R^2) dense, O(E log R) lazy."""
        two_lan = 2 * self.lan_us
        counts = np.bincount(self.host_router, minlength=self.n_routers)
        if self.n_hosts < 2 or counts.max() >= 2:
            return two_lan
        occupied = np.flatnonzero(counts)
        return two_lan + _min_cross_distance(self, occupied, np.arange(len(occupied)))

    # ---- paths --------------------------------------------------------------------
    def _require_paths(self):
        if not self.has_paths:
            raise TopologyError(f"topology {self.name!r} is a latency matrix: no router "
                                "paths, link-level results are not available")

    def directed_link_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, ids): sorted keys `from_router * n_routers + to_router` of every directed
        core link and the link id of each (for compiled route walks); built once."""
        if self._link_keys is None:
            n = np.int64(self.n_routers)
            u = self.edge_src.astype(np.int64)
            v = self.edge_dst.astype(np.int64)
            e = np.arange(self.n_edges, dtype=np.int64)
            keys = np.concatenate([u * n + v, v * n + u])
            ids = np.concatenate([2 * e, 2 * e + 1])
            order = np.argsort(keys)
            self._link_keys = (keys[order], ids[order])
        return self._link_keys

    def directed_link(self, from_router, to_router) -> np.ndarray:
        """Directed core link ids for router hops (arrays); O(log E) each."""
        keys, ids = self.directed_link_keys()
        q = np.asarray(from_router, np.int64) * self.n_routers + np.asarray(to_router, np.int64)
        pos = np.searchsorted(keys, q)
        if np.any(pos >= len(keys)) or np.any(keys[np.minimum(pos, len(keys) - 1)] != q):
            raise TopologyError("router hop without a core link (corrupt routing table)")
        return ids[pos]

    def route_links(self, src_routers, dst_routers):
        """Core directed link ids of many router routes: (pair_index, link), path order.

        Walks the predecessor tables of all pairs at once, one hop per step:
        O(total hops + pairs) with dense tables (lazy: one row per distinct source).
        """
        self._require_paths()
        s = np.asarray(src_routers, np.int64).ravel()
        d = np.asarray(dst_routers, np.int64).ravel()
        if len(s) != len(d):
            raise TopologyError("route_links: src and dst differ in length")
        pair_parts, link_parts, step_parts = [], [], []
        if self.routes.kind == "dense":
            pred = self.routes.pred
            active = np.flatnonzero(s != d)
            cur = d[active]
            step = 0
            while len(active):
                prev = pred[s[active], cur].astype(np.int64)
                pair_parts.append(active)
                link_parts.append(self.directed_link(prev, cur))
                step_parts.append(np.full(len(active), step, np.int64))
                step += 1
                more = prev != s[active]
                active, cur = active[more], prev[more]
        else:
            for src in np.unique(s):
                sel = np.flatnonzero((s == src) & (d != src))
                prow = self.routes.pred_row(src)
                cur = d[sel]
                step = 0
                while len(sel):
                    prev = prow[cur].astype(np.int64)
                    pair_parts.append(sel)
                    link_parts.append(self.directed_link(prev, cur))
                    step_parts.append(np.full(len(sel), step, np.int64))
                    step += 1
                    more = prev != src
                    sel, cur = sel[more], prev[more]
        if not pair_parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        pair = np.concatenate(pair_parts)
        link = np.concatenate(link_parts)
        step = np.concatenate(step_parts)
        order = np.lexsort((-step, pair))          # per pair: source side first
        return pair[order], link[order]

    def path_links(self, src_host, dst_host) -> np.ndarray:
        """Directed link ids of the physical route host -> host (LAN up, core, LAN down)."""
        self._require_paths()
        a, b = int(src_host), int(dst_host)
        if not (0 <= a < self.n_hosts and 0 <= b < self.n_hosts):
            raise TopologyError(f"host id outside 0..{self.n_hosts - 1}")
        if a == b:
            return np.zeros(0, np.int64)
        _, core = self.route_links([self.host_router[a]], [self.host_router[b]])
        base = 2 * self.n_edges
        return np.concatenate([[base + 2 * a], core, [base + 2 * b + 1]]).astype(np.int64)

    def link_delay_us(self) -> np.ndarray:
        """Delay (us) of every directed link id, int64[n_links]."""
        core = np.repeat(self.edge_delay_us.astype(np.int64), 2)
        return np.concatenate([core, np.full(2 * self.n_hosts, self.lan_us, np.int64)])

    # ---- persistence --------------------------------------------------------------
    def save(self, path, include_tables: bool = True) -> None:
        """Write an uncompressed .npz (graph, hosts, and routing tables when dense)."""
        path = Path(path)
        g = self.graph
        arrays = dict(n_routers=np.int64(g.n_routers), edge_src=g.edge_src,
                      edge_dst=g.edge_dst, edge_delay_us=g.edge_delay_us,
                      edge_class=g.edge_class, router_domain=g.router_domain,
                      router_is_transit=g.router_is_transit, router_region=g.router_region,
                      host_router=self.host_router, lan_us=np.int64(self.lan_us),
                      format=np.int64(_FORMAT),
                      meta=np.array(json.dumps({"name": g.name, "meta": g.meta})))
        if g.edge_policy is not None:
            arrays["edge_policy"] = g.edge_policy
        if g.router_xy is not None:
            arrays["router_xy"] = g.router_xy
        if not self.has_paths:
            arrays["site_latency_us"] = self.routes.dist
        elif include_tables and g.n_routers <= self.dense_limit:
            arrays["route_dist"] = self.routes.dist
            arrays["route_pred"] = self.routes.pred
        # a temporary file of this call's own: runs sharing the cache, and threads of one
        # process (the warm-up's), may save the same topology at once (a name, not
        # mkstemp, so that the file gets the usual permissions: analysts read run dirs)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}-{uuid.uuid4().hex}.tmp.npz")
        try:
            np.savez(tmp, **arrays)
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path) -> Topology:
        """Read a file written by `save`; O(file size), no routing recomputation."""
        path = Path(path)
        try:
            z = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise TopologyError(f"{path}: not a topology file ({exc})") from None
        with z:
            if "format" not in z.files or int(z["format"]) != _FORMAT:
                raise TopologyError(f"{path}: not a topology file of format {_FORMAT}")
            info = json.loads(str(z["meta"]))
            g = RouterGraph(int(z["n_routers"]), z["edge_src"], z["edge_dst"],
                            z["edge_delay_us"],
                            edge_policy=z["edge_policy"] if "edge_policy" in z.files else None,
                            edge_class=z["edge_class"], router_domain=z["router_domain"],
                            router_is_transit=z["router_is_transit"],
                            router_region=z["router_region"],
                            router_xy=z["router_xy"] if "router_xy" in z.files else None,
                            name=info["name"], meta=info["meta"])
            site = z["site_latency_us"] if "site_latency_us" in z.files else None
            topo = cls(g, z["host_router"], lan_us=int(z["lan_us"]), site_latency_us=site)
            if "route_dist" in z.files:
                topo._routes = DenseRoutes(g.n_routers, None, None, None, None,
                                           dist=z["route_dist"], pred=z["route_pred"])
        return topo

    def describe(self, sample_sources: int = 256, seed: int = 0) -> dict:
        """Summary statistics; see `topologies.describe.describe_topology`."""
        from .describe import describe_topology
        return describe_topology(self, sample_sources=sample_sources, seed=seed)

    def __repr__(self):
        return (f"Topology({self.name!r}, routers={self.n_routers}, edges={self.n_edges}, "
                f"hosts={self.n_hosts}, paths={self.has_paths})")


def _min_cross_distance(topo: Topology, routers: np.ndarray, label: np.ndarray) -> int:
    """min route delay d(r, s) over routers r != s with label[r] != label[s].

    Dense: row chunks of the table, O(k^2) for k routers. Lazy: one multi-source Dijkstra
    on delays (min_only) from all the routers, then the best edge (u, v) whose nearest
    sources carry different labels gives d(u) + w + d(v): O(E + R log R). For policy
    routing this is a lower bound (min-delay <= policy-route delay), which a lookahead needs.
    """
    routers = np.asarray(routers, np.int64)
    label = np.asarray(label)
    if len(np.unique(label)) < 2:
        raise TopologyError("need routers with at least two different labels")
    if topo.is_dense:
        dist = topo.routes.dist
        best = np.iinfo(np.int64).max
        for lo in range(0, len(routers), 512):
            rows = dist[routers[lo:lo + 512]][:, routers].astype(np.int64)
            diff = label[lo:lo + 512, None] != label[None, :]
            if diff.any():
                best = min(best, int(rows[diff].min()))
        return int(best)
    from scipy.sparse.csgraph import dijkstra

    from .routing import route_weight_matrix
    g = topo.graph
    mat, _ = route_weight_matrix(g.n_routers, g.edge_src, g.edge_dst, g.edge_delay_us, None)
    d, _, nearest = dijkstra(mat, directed=True, indices=routers, min_only=True,
                             return_predecessors=True)
    router_label = np.full(g.n_routers, -1, np.int64)
    _, label_code = np.unique(label, return_inverse=True)
    router_label[routers] = label_code
    near_label = np.where(nearest >= 0, router_label[np.maximum(nearest, 0)], -1)
    u, v = g.edge_src, g.edge_dst
    cross = (near_label[u] != near_label[v]) & (near_label[u] >= 0) & (near_label[v] >= 0)
    if not cross.any():
        raise TopologyError("labelled routers are not connected")
    return int(round(float((d[u] + g.edge_delay_us + d[v])[cross].min())))
