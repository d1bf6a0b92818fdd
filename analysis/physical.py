"""Physical side of the metrics: topology files of a run, routes expanded to directed links.

Used inside Spark Python workers (mapInPandas) and by the driver. Link ids follow
docs/ARCHITECTURE.md: core undirected edge e -> 2e (u->v), 2e+1 (v->u); host h -> LAN uplink
`lan_base + 2h`, downlink `lan_base + 2h + 1`, with `lan_base = n_links - 2 * n_hosts`.
A host-to-host route is: uplink of the sender, core route between the two routers, downlink
of the receiver; the core part depends only on the router pair, which is why callers
aggregate hops by (source router, destination router) before expanding.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

_TOPOLOGY_CACHE: dict[tuple[str, int], object] = {}


def topology_path(run_dir: str | Path, topo: int) -> Path:
    """RUN_DIR/topology/topo-<t>.npz, the file the scenario saved for topology index t."""
    return Path(run_dir) / "topology" / f"topo-{int(topo)}.npz"


def default_reader(path: Path):
    """Read a topology file with `topologies.Topology.load`."""
    from topologies import Topology

    return Topology.load(path)


def load_topology(run_dir: str | Path, topo: int, reader=None):
    """Load (once per process, keyed by path and mtime) the topology of index `topo`.

    reader(path) -> topology; default `topologies.Topology.load`. It runs in Spark workers,
    so it must be picklable (a module-level function).
    """
    path = topology_path(run_dir, topo)
    if not path.is_file():
        raise FileNotFoundError(f"topology file {path} is missing (needed for delays and routes)")
    key = (str(path), os.stat(path).st_mtime_ns)
    topology = _TOPOLOGY_CACHE.get(key)
    if topology is None:
        topology = (reader or default_reader)(path)
        _TOPOLOGY_CACHE.clear()   # one topology at a time keeps worker memory bounded
        _TOPOLOGY_CACHE[key] = topology
    return topology


def lan_base(topo) -> int:
    """First LAN link id (= number of directed core links)."""
    return int(topo.n_links) - 2 * int(topo.n_hosts)


class CoreRoutes:
    """Core (router-to-router) part of IP routes as directed link ids, cached per pair.

    Built on the documented `topo.path_links(src_host, dst_host)`: the route between two
    routers is the path between one host of each, minus the two LAN links. Each distinct
    router pair costs one `path_links` call; later lookups are dict hits.
    """

    def __init__(self, topo):
        if not topo.has_paths:
            raise ValueError("topology has no physical paths (latency matrix only)")
        self.topo = topo
        self.lan_base = lan_base(topo)
        host_router = np.asarray(topo.host_router)
        routers, first_host = np.unique(host_router, return_index=True)
        self.representative = dict(zip(routers.tolist(), first_host.tolist()))
        self._cache: dict[tuple[int, int], np.ndarray] = {}

    def links(self, src_router: int, dst_router: int) -> np.ndarray:
        """int64 directed core link ids of the route src_router -> dst_router (empty if equal)."""
        key = (int(src_router), int(dst_router))
        route = self._cache.get(key)
        if route is None:
            if key[0] == key[1]:
                route = np.empty(0, dtype=np.int64)
            else:
                try:
                    a, b = self.representative[key[0]], self.representative[key[1]]
                except KeyError as exc:
                    raise ValueError(f"router {exc.args[0]} has no attached host") from None
                path = np.asarray(self.topo.path_links(a, b), dtype=np.int64)
                route = path[path < self.lan_base]
            self._cache[key] = route
        return route


def core_pair_loads(routes: CoreRoutes, src_router: np.ndarray, dst_router: np.ndarray,
                    count: np.ndarray) -> np.ndarray:
    """Packets per directed core link when `count[i]` packets go src_router[i] -> dst_router[i].

    Returns int64[n_links] (LAN entries zero). O(P * L) for P pairs of route length L, plus one
    `path_links` call per pair not yet cached.
    """
    n_links = int(routes.topo.n_links)
    if len(src_router) == 0:
        return np.zeros(n_links, dtype=np.int64)
    link_lists = [routes.links(s, d) for s, d in zip(src_router.tolist(), dst_router.tolist())]
    lengths = np.fromiter((len(x) for x in link_lists), dtype=np.int64, count=len(link_lists))
    all_links = np.concatenate(link_lists) if link_lists else np.empty(0, np.int64)
    weights = np.repeat(np.asarray(count, dtype=np.int64), lengths)
    return np.bincount(all_links, weights=weights, minlength=n_links).astype(np.int64)


def core_union_loads(routes: CoreRoutes, src_router: int, dst_routers: np.ndarray) -> np.ndarray:
    """Distinct directed core links of the union of routes src_router -> each dst router.

    This is one IP-multicast tree's core part (each link of the union carries one copy).
    Returns sorted int64 link ids; O(M * L) for M destination routers.
    """
    lists = [routes.links(src_router, d) for d in np.unique(dst_routers).tolist()]
    if not lists:
        return np.empty(0, dtype=np.int64)
    return np.unique(np.concatenate(lists))
