"""Physical side of the metrics: topology files of a run, routes expanded to directed links.

Used inside Spark Python workers (mapInPandas) and by the driver. Link ids follow
docs/ARCHITECTURE.md: core undirected edge e -> 2e (u->v), 2e+1 (v->u); host h -> LAN uplink
`lan_base + 2h`, downlink `lan_base + 2h + 1`, with `lan_base = n_links - 2 * n_hosts`.
A host-to-host route is: uplink of the sender, core route between the two routers, downlink
of the receiver; the core part depends only on the router pair, which is why callers
aggregate hops by (source router, destination router) before expanding. Expansion uses the
vectorized `topo.route_links(src_routers, dst_routers)`: all pairs of a batch walk their
predecessor chains together, one numpy step per hop, so no Python work is done per pair.
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
    """Read a topology file written by `Topology.save` (`topologies.load_topology`)."""
    from topologies import load_topology as read

    return read(path)


def load_topology(run_dir: str | Path, topo: int, reader=None):
    """Load (once per process, keyed by path and mtime) the topology of index `topo`.

    reader(path) -> topology; default `topologies.load_topology`. It runs in Spark workers,
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


def by_topology(df):
    """`df` (a Spark DataFrame with a `topo` column) sorted by topology within each
    partition, for mapInPandas stages that load topologies: a worker keeps one topology in
    memory (~150 MB for ts5050 with 10^5 hosts), so batches mixing topologies would reload
    it for every batch (a 10-topology run spent minutes that way). Sorting, not
    repartitioning by topology, keeps a one-topology run spread over every core."""
    return df.sortWithinPartitions("topo")


def lan_base(topo) -> int:
    """First LAN link id (= number of directed core links)."""
    return int(topo.n_links) - 2 * int(topo.n_hosts)


def _expand_pairs(topo, src_router, dst_router) -> tuple[int, np.ndarray, np.ndarray]:
    """(n_links, pair, link): row i of the output says pair `pair[i]` crosses core link
    `link[i]`. Raises if the topology keeps no paths."""
    if not topo.has_paths:
        raise ValueError("topology has no physical paths (latency matrix only)")
    n_links = int(topo.n_links)
    if len(src_router) == 0:
        return n_links, np.zeros(0, np.int64), np.zeros(0, np.int64)
    pair, link = topo.route_links(np.asarray(src_router, np.int64),
                                  np.asarray(dst_router, np.int64))
    return n_links, pair, link


def core_pair_loads(topo, src_router: np.ndarray, dst_router: np.ndarray,
                    count: np.ndarray) -> np.ndarray:
    """Packets per directed core link when `count[i]` packets go src_router[i] -> dst_router[i].

    Returns int64[n_links] (LAN entries zero). One `route_links` call for all pairs:
    O(P + total route length) numpy work, P pairs (equal routers give no core links).
    """
    n_links, pair, link = _expand_pairs(topo, src_router, dst_router)
    weights = np.asarray(count, dtype=np.int64)[pair]
    return np.bincount(link, weights=weights, minlength=n_links).astype(np.int64)


def core_union_counts(topo, tree: np.ndarray, src_router: np.ndarray,
                      dst_router: np.ndarray) -> np.ndarray:
    """Per directed core link, the number of trees whose route union uses it.

    Row i says: tree `tree[i]` routes src_router[i] -> dst_router[i] (one source router per
    tree). Each tree's union of routes loads each of its links once (an IP-multicast tree's
    core part). Returns int64[n_links]; O(P + total route length + sort of the (tree, link)
    rows) for P pairs.
    """
    n_links, pair, link = _expand_pairs(topo, src_router, dst_router)
    tree_link = np.unique(np.asarray(tree, np.int64)[pair] * n_links + link)
    return np.bincount(tree_link % n_links, minlength=n_links).astype(np.int64)
