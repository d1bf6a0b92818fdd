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
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numba import njit

_TOPOLOGY_CACHE: dict[tuple[str, int], object] = {}


def topology_path(run_dir: str | Path, topo: int) -> Path:
    """RUN_DIR/topology/topo-<t>.npz, the file the scenario saved for topology index t."""
    return Path(run_dir) / "topology" / f"topo-{int(topo)}.npz"


def default_reader(path: Path):
    """Read a topology file written by `Topology.save` (`topologies.load_topology`)."""
    from topologies import load_topology as read

    return read(path)


def read_cached(path: str | Path, reader=None):
    """Load (once per process, keyed by path and mtime) the topology file at `path`.

    reader(path) -> topology; default `topologies.load_topology`. It runs in Spark workers,
    so it must be picklable (a module-level function)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"topology file {path} is missing (needed for delays and routes)")
    key = (str(path), os.stat(path).st_mtime_ns)
    topology = _TOPOLOGY_CACHE.get(key)
    if topology is None:
        topology = (reader or default_reader)(path)
        _TOPOLOGY_CACHE.clear()   # one topology at a time keeps worker memory bounded
        _TOPOLOGY_CACHE[key] = topology
    return topology


def load_topology(run_dir: str | Path, topo: int, reader=None):
    """The topology of index `topo` of a run directory (cached per process)."""
    return read_cached(topology_path(run_dir, topo), reader)


@dataclass(frozen=True)
class TopologyFiles:
    """How Spark tasks reach the run's topology files (a small picklable handle).

    `shipped` empty: tasks read the driver's paths (embedded Ray, or a run directory on a
    filesystem every node mounts). Otherwise the driver broadcast each file's bytes
    (`shipped[t]`, a Spark broadcast variable, fetched by each executor through Spark's
    block manager) and a task writes them once per machine to a local temporary file, so no
    task needs a path that exists only on the driver's disk.
    """

    paths: dict[int, str]
    shipped: dict = field(default_factory=dict)
    reader: Callable | None = None
    tag: str = ""

    def load(self, topo: int):
        topo = int(topo)
        if not self.shipped:
            return read_cached(self.paths[topo], self.reader)
        try:
            return read_cached(self._local_copy(topo), self.reader)
        except FileNotFoundError:   # pruned by another run between the write and the read
            return read_cached(self._local_copy(topo), self.reader)

    def _local_copy(self, topo: int) -> Path:
        """This run's copy of topology `topo` in the machine's temporary directory, written
        from the broadcast when missing; writing one prunes the copies other runs left
        (:func:`prune_local_copies`)."""
        import tempfile
        tmpdir = Path(tempfile.gettempdir())
        local = tmpdir / f"{LOCAL_COPY_PREFIX}{self.tag}-topo-{topo}.npz"
        if not local.is_file():
            tmp = local.with_name(f"{local.name}.{os.getpid()}.tmp")
            tmp.write_bytes(self.shipped[topo].value)
            os.replace(tmp, local)
            prune_local_copies(tmpdir, keep_tag=self.tag)
        return local

    def release(self) -> None:
        """Drop the broadcast copies (driver and executors)."""
        for bc in self.shipped.values():
            bc.unpersist()


LOCAL_COPY_PREFIX = "scribe-emu-"
STALE_COPY_S = 3600.0


def prune_local_copies(tmpdir: Path, keep_tag: str, older_than_s: float = STALE_COPY_S,
                       now: float | None = None) -> list[Path]:
    """Remove the topology copies (and unfinished writes) of runs other than `keep_tag`
    written more than `older_than_s` ago; returns what was removed. Executors on other
    machines outlive no run's driver call, so nothing else removes them (a ts5050 copy is
    ~150 MB). A run still reading a pruned copy writes it again from its broadcast
    (:meth:`TopologyFiles.load`). O(files in tmpdir)."""
    import time
    now = time.time() if now is None else now
    removed = []
    for f in tmpdir.glob(f"{LOCAL_COPY_PREFIX}{'?' * 12}-topo-*.npz*"):
        if f.name.startswith(f"{LOCAL_COPY_PREFIX}{keep_tag}-"):
            continue
        try:
            if now - f.stat().st_mtime > older_than_s:
                f.unlink()
                removed.append(f)
        except FileNotFoundError:   # another run pruned it first
            continue
    return removed


def ship_topologies(spark, run_dir: str | Path, indices: list[int], reader=None,
                    ship: bool = False) -> TopologyFiles:
    """A TopologyFiles for the run; ship=True broadcasts the files' bytes (named by a tag
    unique to the files and their mtimes, so runs in one session do not clash)."""
    paths = {t: str(topology_path(run_dir, t).resolve()) for t in indices}
    if not ship:
        return TopologyFiles(paths, {}, reader)
    import hashlib
    stamp = ";".join(f"{p}:{os.stat(p).st_mtime_ns}" for p in paths.values())
    tag = hashlib.sha1(stamp.encode()).hexdigest()[:12]
    shipped = {t: spark.sparkContext.broadcast(Path(p).read_bytes()) for t, p in paths.items()}
    return TopologyFiles(paths, shipped, reader, tag)


def topology_numbers(path: str | Path, reader=None) -> dict:
    """n_links, n_hosts, lan_base, has_paths of a topology file, from the array headers of
    the .npz (no array data is read; a 154 MB ts5050 file costs microseconds). A custom
    reader (tests) or a file of another layout is loaded whole instead."""
    if reader is None:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            if {"edge_src.npy", "host_router.npy"} <= names:
                n_edges = _npy_length(z, "edge_src.npy")
                n_hosts = _npy_length(z, "host_router.npy")
                n_links = 2 * n_edges + 2 * n_hosts
                return {"n_links": n_links, "n_hosts": n_hosts, "lan_base": 2 * n_edges,
                        "has_paths": "site_latency_us.npy" not in names}
    topo = read_cached(path, reader)
    return {"n_links": int(topo.n_links), "n_hosts": int(topo.n_hosts),
            "lan_base": lan_base(topo), "has_paths": bool(topo.has_paths)}


def _npy_length(z: zipfile.ZipFile, name: str) -> int:
    with z.open(name) as f:
        version = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        shape, _, _ = read(f)
    return int(shape[0]) if shape else 0


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

    Returns int64[n_links] (LAN entries zero). O(P + total route length) for P pairs: a
    compiled walk of each route on dense predecessor tables (`_walk_loads`), else one
    vectorised `route_links` call (equal routers give no core links).
    """
    dense = _dense_tables(topo)
    if dense is not None:
        pred, keys, ids, n_routers, n_links = dense
        loads = np.zeros(n_links, np.int64)
        bad = _walk_loads(pred, keys, ids, n_routers, np.asarray(src_router, np.int64),
                          np.asarray(dst_router, np.int64), np.asarray(count, np.int64),
                          loads)
        _check_walk(bad)
        return loads
    n_links, pair, link = _expand_pairs(topo, src_router, dst_router)
    weights = np.asarray(count, dtype=np.int64)[pair]
    return np.bincount(link, weights=weights, minlength=n_links).astype(np.int64)


def core_union_counts(topo, tree: np.ndarray, src_router: np.ndarray,
                      dst_router: np.ndarray) -> np.ndarray:
    """Per directed core link, the number of trees whose route union uses it.

    Row i says: tree `tree[i]` routes src_router[i] -> dst_router[i]. Each tree's union of
    routes loads each of its links once (an IP-multicast tree's core part). Returns
    int64[n_links]. Dense predecessor tables: O(P log P + union sizes), each route walked
    from its destination until it meets a link its tree's walks from the same source
    already took (`_walk_union`); else O(P + total route length + a sort of the
    (tree, link) rows).
    """
    dense = _dense_tables(topo)
    if dense is not None:
        pred, keys, ids, n_routers, n_links = dense
        tree = np.asarray(tree, np.int64)
        src = np.asarray(src_router, np.int64)
        order = np.lexsort((src, tree))      # the walks of a tree, and of a source, together
        counts = np.zeros(n_links, np.int64)
        bad = _walk_union(pred, keys, ids, n_routers, tree[order], src[order],
                          np.asarray(dst_router, np.int64)[order], counts)
        _check_walk(bad)
        return counts
    n_links, pair, link = _expand_pairs(topo, src_router, dst_router)
    tree_link = np.unique(np.asarray(tree, np.int64)[pair] * n_links + link)
    return np.bincount(tree_link % n_links, minlength=n_links).astype(np.int64)


def _dense_tables(topo):
    """(pred, link keys, link ids, n_routers, n_links) when `topo` keeps dense all-pairs
    predecessor tables (generated and measured topologies of up to DENSE_MAX_ROUTERS
    routers), else None (lazy tables, test doubles)."""
    routes = getattr(topo, "routes", None)
    if getattr(routes, "kind", None) != "dense" or not hasattr(topo, "directed_link_keys"):
        return None
    if not topo.has_paths:
        raise ValueError("topology has no physical paths (latency matrix only)")
    keys, ids = topo.directed_link_keys()
    return routes.pred, keys, ids, int(topo.n_routers), int(topo.n_links)


def _check_walk(bad: int) -> None:
    if bad >= 0:
        from topologies import TopologyError
        raise TopologyError(f"route {bad}: a router hop without a core link (corrupt "
                            "routing table)")


# Compiled route walks (numba, cached on disk): a route is the chain of predecessors
# pred[s, .] from its destination back to s, one binary search per hop for the link id.
# The numpy version walked all routes in lock step and then sorted the (tree, link) rows:
# on the 10-topology paper run the IP-multicast unions were half of link stress' CPU.

@njit(cache=True)
def _hop_into(pred, keys, ids, n_routers, s, cur):
    """(previous router, directed link id) of the hop into `cur` on the route from `s`;
    link -1 when the tables have no such link (a corrupt routing table)."""
    prev = np.int64(pred[s, cur])
    q = prev * n_routers + cur
    pos = np.searchsorted(keys, q)
    if prev < 0 or pos >= len(keys) or keys[pos] != q:
        return prev, -1
    return prev, ids[pos]


@njit(cache=True)
def _walk_loads(pred, keys, ids, n_routers, src, dst, count, loads):
    """loads[link] += count[i] for every core link of route i; -1, or the first bad route."""
    for i in range(len(src)):
        s, cur = src[i], dst[i]
        while cur != s:
            prev, link = _hop_into(pred, keys, ids, n_routers, s, cur)
            if link < 0:
                return i
            loads[link] += count[i]
            cur = prev
    return -1


@njit(cache=True)
def _walk_union(pred, keys, ids, n_routers, tree, src, dst, counts):
    """counts[link] += 1 per tree whose routes use it; rows sorted by (tree, src). A walk
    stops at a link an earlier walk of the same (tree, source) took: the rest of the way
    to the source is the same predecessor chain, already counted."""
    n_links = len(counts)
    seen_tree = np.full(n_links, -1, np.int64)    # last tree run that counted the link
    seen_walk = np.full(n_links, -1, np.int64)    # last (tree, source) run that took it
    run = tree_run = -1
    for i in range(len(src)):
        if i == 0 or tree[i] != tree[i - 1]:
            tree_run += 1
        if i == 0 or tree[i] != tree[i - 1] or src[i] != src[i - 1]:
            run += 1
        s, cur = src[i], dst[i]
        while cur != s:
            prev, link = _hop_into(pred, keys, ids, n_routers, s, cur)
            if link < 0:
                return i
            if seen_walk[link] == run:
                break
            seen_walk[link] = run
            if seen_tree[link] != tree_run:
                seen_tree[link] = tree_run
                counts[link] += 1
            cur = prev
    return -1
