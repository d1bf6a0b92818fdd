"""`make_topology`: one entry point from a source string, with an on-disk cache.

Sources: "ts5050" | "ts600" | "rocketfuel:<.cch or tarball>[:<AS>]" | "zoo:<.graphml>" |
"planetlab:<matrix>" | "edges:<csv>" | "topohub:<name>".
The cache holds the core graph and its routing tables (hosts are attached afterwards, they
are cheap), keyed by (source, seed) and, for files, by their size and modification time.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from .errors import TopologyError
from .hosts import attach_hosts, scale_mean_delay
from .loaders import (
    load_edge_csv,
    load_latency_matrix,
    load_rocketfuel,
    load_zoo,
    read_rocketfuel_latencies,
)
from .topology import Topology
from .transit_stub import PRESETS, generate_transit_stub

_WEIGHTS_TARBALL = "rocketfuel-weights-dist.tar.gz"


def _split_source(source: str) -> tuple[str, str]:
    if source in PRESETS:
        return source, ""
    kind, sep, rest = source.partition(":")
    if not sep or kind not in ("rocketfuel", "zoo", "planetlab", "edges", "topohub") or not rest:
        raise TopologyError(f"unknown topology source {source!r}; use one of "
                            f"{', '.join(PRESETS)}, rocketfuel:<path>[:<AS>], zoo:<path>, "
                            "planetlab:<path>, edges:<csv>, topohub:<name>")
    return kind, rest


def build_core(source: str, seed: int) -> Topology:
    """The host-less topology a source describes (no caching)."""
    kind, rest = _split_source(source)
    if kind in PRESETS:
        return Topology(generate_transit_stub(preset=kind, seed=seed), [])
    if kind == "rocketfuel":
        m = re.match(r"^(.*?)(?::(\d+))?$", rest)
        path, asn = Path(m.group(1)), m.group(2)
        if asn is None:
            asn = path.name.split(".")[0] if path.name.endswith(".cch") else None
        lat = None
        for cand in (path.parent / _WEIGHTS_TARBALL, path.parent / "latencies.intra"):
            if cand.exists() and asn is not None:
                try:
                    lat = read_rocketfuel_latencies(cand, asn)
                except TopologyError:
                    lat = None     # no latencies for this AS: documented fallback
                break
        return Topology(load_rocketfuel(path, asn, latencies=lat), [])
    if kind == "zoo":
        return Topology(load_zoo(rest), [])
    if kind == "edges":
        return Topology(load_edge_csv(rest), [])
    if kind == "planetlab":
        mat, meta = load_latency_matrix(rest)
        return Topology.from_latency_matrix(mat, [], name=f"planetlab-{Path(rest).stem}",
                                            meta=meta)
    return Topology(_load_topohub(rest), [])


def _load_topohub(name: str):
    try:
        import topohub
    except ImportError:
        raise TopologyError("topohub source needs the 'topohub' package "
                            "(pip install topohub); it is not installed") from None
    import networkx as nx
    import topohub
    try:
        data = topohub.get(name)
    except Exception as exc:
        raise TopologyError(f"topohub: cannot load {name!r} ({exc})") from None
    g = data if isinstance(data, nx.Graph) else nx.node_link_graph(data)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / f"{name.replace('/', '_')}.graphml"
        for _, d in g.nodes(data=True):
            if "lat" in d and "Latitude" not in d:
                d["Latitude"], d["Longitude"] = d["lat"], d.get("lon", d.get("lng"))
            for k in list(d):
                if not isinstance(d[k], (str, int, float, bool)):
                    del d[k]
        for *_, d in g.edges(data=True):
            d.clear()
        nx.write_graphml(g, p)
        return load_zoo(p)


def cache_key(source: str, seed: int, mean_core_delay_us: float = 0) -> str:
    kind, rest = _split_source(source)
    parts = [source, str(int(seed)) if kind in PRESETS else ""]
    if mean_core_delay_us:          # only then: the unscaled cores keep their cache files
        parts.append(f"mean{float(mean_core_delay_us)!r}")
    if rest:
        fpath = Path(re.sub(r":\d+$", "", rest)) if kind == "rocketfuel" else Path(rest)
        if fpath.exists():
            st = fpath.stat()
            parts += [str(fpath.resolve()), str(st.st_size), str(st.st_mtime_ns)]
    digest = hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]
    slug = re.sub(r"[^A-Za-z0-9]+", "_", Path(rest).name if rest else kind)[:40]
    return f"{kind}-{slug}-{digest}"


def make_topology(source: str, seed: int, n_hosts: int, cache_dir=None,
                  lan_us: int = 1000, placement: str = "uniform",
                  lan_hosts_per_router: int = 100, mean_core_delay_us: float = 0) -> Topology:
    """Topology for a source and seed with n_hosts attached per `placement` (see
    topologies.hosts: "uniform" routers, or a uniform sample of `lan_hosts_per_router`
    LAN slots per router). mean_core_delay_us > 0 scales the core-link delays to that mean
    (0: as generated or measured).

    With cache_dir: the core graph + routing tables are loaded from (or saved to)
    `<cache_dir>/<key>.npz`, so a second run skips generation and all-pairs routing.
    """
    core = None
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"{cache_key(source, seed, mean_core_delay_us)}.npz"
        if path.exists():
            try:
                core = Topology.load(path)
            except TopologyError:
                core = None          # unreadable cache entry: rebuild and overwrite
    if core is None:
        core = build_core(source, seed)
        if mean_core_delay_us:
            if not core.has_paths:
                raise TopologyError(f"{source}: a latency matrix has no core links whose "
                                    "delays could be scaled (mean core delay target)")
            core = Topology(scale_mean_delay(core.graph, mean_core_delay_us), [])
        if core.has_paths and core.n_routers <= core.dense_limit:
            core.routes            # noqa: B018 (builds the tables once, for the cache)
        if path is not None:
            core.save(path)
    return attach_hosts(core, n_hosts, seed=seed, lan_us=lan_us, placement=placement,
                        lan_hosts_per_router=lan_hosts_per_router)
