"""Loaders for measured topologies: Rocketfuel .cch (+ inferred latencies), Topology Zoo
GraphML, a PlanetLab-style RTT matrix, a CSV edge list. Delay rules: docs/topologies.md.

Every loader raises TopologyError naming the file, the line (when there is one) and what
was wrong; nothing is returned half-built.
"""
from __future__ import annotations

import gzip
import math
import re
import tarfile
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, shortest_path

from .errors import TopologyError
from .graph import RouterGraph

SAME_CITY_US = 500            # Rocketfuel link inside one city
UNMEASURED_DEFAULT_US = 5000  # Rocketfuel link with no usable latency information
FIBRE_KM_PER_US = 0.2         # propagation at 2/3 c: 200 km per ms
MIN_LINK_US = 100             # co-located PoPs (Topology Zoo)
EARTH_RADIUS_KM = 6371.0


def _open_text(path: Path, member: str | None = None) -> list[str]:
    """Lines of a plain, .gz, or tar.gz member text file."""
    try:
        if member is not None:
            with tarfile.open(path) as tar:
                f = tar.extractfile(member)
                if f is None:
                    raise TopologyError(f"{path}: member {member} is not a file")
                data = f.read()
        elif path.suffix == ".gz":
            data = gzip.decompress(path.read_bytes())
        else:
            data = path.read_bytes()
    except (OSError, tarfile.TarError, KeyError, EOFError) as exc:
        where = f"{path}{':' + member if member else ''}"
        raise TopologyError(f"{where}: cannot read ({exc})") from None
    return data.decode("utf-8", errors="replace").splitlines()


def largest_component(n, u, v):
    """Keep the largest connected component: (old->new map int64[n] with -1, kept count)."""
    m = csr_matrix((np.ones(len(u)), (u, v)), shape=(n, n))
    _, lab = connected_components(m, directed=False)
    big = np.argmax(np.bincount(lab))
    keep = lab == big
    remap = np.full(n, -1, np.int64)
    remap[keep] = np.arange(keep.sum())
    return remap, int(keep.sum())


# ---------------------------------------------------------------------------- Rocketfuel
_CCH_LINE = re.compile(r"^(\d+)\s+@(\S+)\s.*?->(.*?)=")
_CITY_SUFFIX = re.compile(r"\d+$")


def _cch_members(path: Path, asn: str | None):
    """(source label, lines) of the .cch to read: a file, or `<AS>.cch` in the tarball."""
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        if asn is None:
            raise TopologyError(f"{path}: a Rocketfuel tarball needs an AS, "
                                f"e.g. rocketfuel:{path}:1239")
        try:
            with tarfile.open(path) as tar:
                names = [m.name for m in tar.getmembers()]
        except (OSError, tarfile.TarError) as exc:
            raise TopologyError(f"{path}: cannot read ({exc})") from None
        want = [n for n in names if Path(n).name == f"{asn}.cch"]
        if not want:
            known = sorted({Path(n).name.split(".")[0] for n in names if n.endswith(".cch")})
            raise TopologyError(f"{path}: no {asn}.cch inside (ASes: {', '.join(known)})")
        return f"{path}:{want[0]}", _open_text(path, want[0])
    return str(path), _open_text(path)


def read_rocketfuel_latencies(path: Path, asn: str | None = None) -> dict:
    """City-pair latency (us) from Rocketfuel `latencies.intra` (plain, or `<AS>/latencies.intra`
    in the weights tarball): per unordered city pair the smallest measured PoP-pair latency."""
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        if asn is None:
            raise TopologyError(f"{path}: latency tarball needs an AS")
        with tarfile.open(path) as tar:
            names = [m.name for m in tar.getmembers() if m.name.endswith(f"{asn}/latencies.intra")]
        if not names:
            raise TopologyError(f"{path}: no latencies for AS {asn}")
        label, lines = f"{path}:{names[0]}", _open_text(path, names[0])
    else:
        label, lines = str(path), _open_text(path)
    pairs: dict[tuple[str, str], int] = {}
    for no, line in enumerate(lines, 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3:
            raise TopologyError(f"{label}:{no}: expected 'CityA CityB latency_ms', got {line!r}")
        try:
            ms = float(parts[2])
        except ValueError:
            raise TopologyError(f"{label}:{no}: latency {parts[2]!r} is not a number") from None
        if not ms > 0:
            raise TopologyError(f"{label}:{no}: latency must be > 0 ms, got {ms}")
        a, b = (_CITY_SUFFIX.sub("", p) for p in parts[:2])
        key = (a, b) if a <= b else (b, a)
        us = int(round(ms * 1000))
        pairs[key] = min(pairs.get(key, us), us)
    return pairs


def load_rocketfuel(path, asn: str | None = None, latencies=None) -> RouterGraph:
    """Rocketfuel .cch map (internal routers, largest component) with link delays:
    - both ends in the same city: SAME_CITY_US;
    - two cities with a measured latency: that latency;
    - two known cities without one: the shortest path over the measured city graph;
    - an end with an unknown/ambiguous location (@?, @T), or no latency data at all:
      the median measured latency (UNMEASURED_DEFAULT_US without a latency file).
    Routers are grouped by city (router_domain = router_region = city id).
    """
    path = Path(path)
    label, lines = _cch_members(path, asn)
    uid_city: dict[int, str] = {}
    neigh: dict[int, list[int]] = {}
    for no, line in enumerate(lines, 1):
        s = line.strip()
        if not s or s.startswith("-") or s.startswith("#"):
            continue                      # external address lines
        m = _CCH_LINE.match(s)
        if m is None:
            raise TopologyError(f"{label}:{no}: not a .cch router line: {s[:80]!r}")
        uid = int(m.group(1))
        uid_city[uid] = m.group(2)
        try:
            neigh[uid] = [int(t) for t in re.findall(r"<(-?\d+)>", m.group(3))]
        except ValueError:
            raise TopologyError(f"{label}:{no}: bad neighbour list") from None
    if not uid_city:
        raise TopologyError(f"{label}: no routers in the file")
    uids = np.array(sorted(uid_city), np.int64)
    index = {u: i for i, u in enumerate(uids.tolist())}
    eu, ev = [], []
    for u, ns in neigh.items():
        for w in ns:
            if w in index and w != u:
                eu.append(index[u])
                ev.append(index[w])
    eu, ev = np.array(eu, np.int64), np.array(ev, np.int64)
    lo, hi = np.minimum(eu, ev), np.maximum(eu, ev)
    key = np.unique(lo * len(uids) + hi)
    eu, ev = key // len(uids), key % len(uids)
    if not len(eu):
        raise TopologyError(f"{label}: no links between internal routers")
    remap, n = largest_component(len(uids), eu, ev)
    keep = remap[eu] >= 0
    eu, ev = remap[eu[keep]], remap[ev[keep]]
    cities = np.array([uid_city[int(u)] for u in uids[remap >= 0]])
    city_names, city_id = np.unique(cities, return_inverse=True)

    lat = {}
    if latencies is not None:
        lat = latencies if isinstance(latencies, dict) else \
            read_rocketfuel_latencies(Path(latencies), asn)
    known = np.array([c not in ("?", "T") for c in city_names])
    default = int(np.median(list(lat.values()))) if lat else UNMEASURED_DEFAULT_US
    # city-to-city delay: measured, else shortest path over measured pairs
    ci = {c: i for i, c in enumerate(city_names)}
    mu = [(ci[a], ci[b], us) for (a, b), us in lat.items() if a in ci and b in ci and a != b]
    nc = len(city_names)
    if mu:
        a, b, w = map(np.array, zip(*mu, strict=True))
        cm = csr_matrix((np.concatenate([w, w]).astype(float),
                         (np.concatenate([a, b]), np.concatenate([b, a]))), shape=(nc, nc))
        city_dist = shortest_path(cm, directed=False)
    else:
        city_dist = np.full((nc, nc), np.inf)
    ca, cb = city_id[eu], city_id[ev]
    delay = city_dist[ca, cb]
    delay = np.where(np.isfinite(delay), delay, default)
    delay = np.where(~known[ca] | ~known[cb], default, delay)
    delay = np.where(ca == cb, SAME_CITY_US, delay).astype(np.int64)
    measured = int(sum(x != y and (min(x, y), max(x, y)) in lat
                       for x, y in zip(city_names[ca].tolist(), city_names[cb].tolist(),
                                       strict=True)))
    meta = dict(source="rocketfuel", file=label, asn=asn, routers_in_file=len(uids),
                cities=int(nc), links_measured_city_pair=measured,
                links_same_city=int((ca == cb).sum()), latency_file=latencies is not None)
    return RouterGraph(n, eu, ev, delay, router_domain=city_id, router_region=city_id,
                       name=f"rocketfuel-{asn or path.stem}", meta=meta)


# ---------------------------------------------------------------------------- Topology Zoo
def great_circle_km(lat1, lon1, lat2, lon2):
    """Haversine distance (km) on a sphere of radius 6371 km; vectorized."""
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dp, dl = p2 - p1, np.radians(np.asarray(lon2) - np.asarray(lon1))
    h = np.sin(dp / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0, 1)))


def load_zoo(path) -> RouterGraph:
    """Topology Zoo GraphML: delay = great-circle length / (2/3 c), at least MIN_LINK_US;
    links with an end lacking coordinates get the median delay of the others.
    Largest connected component; region = 10-degree latitude/longitude cell."""
    import networkx as nx
    path = Path(path)
    try:
        g = nx.read_graphml(path)
    except Exception as exc:  # networkx raises several parser errors
        raise TopologyError(f"{path}: not valid GraphML ({exc})") from None
    nodes = list(g.nodes)
    if not nodes:
        raise TopologyError(f"{path}: no nodes")
    idx = {v: i for i, v in enumerate(nodes)}
    latlon = np.full((len(nodes), 2), np.nan)
    for v, d in g.nodes(data=True):
        try:
            if "Latitude" in d and "Longitude" in d:
                latlon[idx[v]] = float(d["Latitude"]), float(d["Longitude"])
        except (TypeError, ValueError):
            raise TopologyError(f"{path}: node {v!r} has non-numeric coordinates") from None
    pairs = {(min(idx[a], idx[b]), max(idx[a], idx[b])) for a, b in g.edges() if a != b}
    if not pairs:
        raise TopologyError(f"{path}: no links")
    eu, ev = map(lambda x: np.array(x, np.int64), zip(*sorted(pairs), strict=True))
    remap, n = largest_component(len(nodes), eu, ev)
    keep = remap[eu] >= 0
    eu, ev = eu[keep], ev[keep]
    km = great_circle_km(latlon[eu, 0], latlon[eu, 1], latlon[ev, 0], latlon[ev, 1])
    delay = np.maximum(km / FIBRE_KM_PER_US, MIN_LINK_US)
    ok = np.isfinite(delay)
    fill = float(np.median(delay[ok])) if ok.any() else 1000.0 * 5
    delay = np.where(ok, delay, fill)
    kept = remap >= 0
    ll = latlon[kept]
    cell = np.where(np.isfinite(ll), np.floor(np.nan_to_num(ll) / 10), -99).astype(np.int64)
    _, region = np.unique(cell[:, 0] * 1000 + cell[:, 1], return_inverse=True)
    meta = dict(source="topologyzoo", file=str(path), nodes_in_file=len(nodes),
                links_without_coordinates=int((~ok).sum()))
    return RouterGraph(n, remap[eu], remap[ev], np.rint(delay), router_domain=region,
                       router_region=region, router_xy=ll[:, ::-1],
                       name=f"zoo-{path.stem}", meta=meta)


# ---------------------------------------------------------------------------- PlanetLab
def load_latency_matrix(path) -> tuple[np.ndarray, dict]:
    """Whitespace-separated RTT matrix in ms (plain or .gz) -> one-way int32 us matrix.

    One-way = mean of the two directions / 2. Missing entries (empty, negative, NaN) are
    filled with the shortest path through measured entries; a site left unreachable is
    an error."""
    path = Path(path)
    rows = []
    width = None
    for no, line in enumerate(_open_text(path), 1):
        parts = line.replace(",", " ").split()
        if not parts:
            continue
        try:
            vals = [float(p) for p in parts]
        except ValueError:
            bad = next(p for p in parts if not _is_float(p))
            raise TopologyError(f"{path}:{no}: {bad!r} is not a number") from None
        if width is None:
            width = len(vals)
        elif len(vals) != width:
            raise TopologyError(f"{path}:{no}: {len(vals)} columns, expected {width}")
        rows.append(vals)
    if not rows:
        raise TopologyError(f"{path}: empty matrix")
    m = np.array(rows)
    if m.shape[0] != m.shape[1]:
        raise TopologyError(f"{path}: matrix is {m.shape[0]} x {m.shape[1]}, not square")
    missing = ~np.isfinite(m) | (m < 0)
    m = np.where(missing, np.nan, m)
    both = np.stack([m, m.T])
    n_seen = np.isfinite(both).sum(axis=0)
    sym = np.where(n_seen > 0, np.nansum(both, axis=0) / np.maximum(n_seen, 1), np.nan) / 2
    np.fill_diagonal(sym, 0)
    n_missing = int(np.isnan(sym).sum())
    if n_missing:
        w = np.where(np.isnan(sym), 0, np.maximum(sym, 1e-3))
        sym = np.where(np.isnan(sym), shortest_path(csr_matrix(w), directed=False), sym)
        if not np.isfinite(sym).all():
            raise TopologyError(f"{path}: some sites have no measured path to others")
    us = np.maximum(np.rint(sym * 1000), 1).astype(np.int64)
    np.fill_diagonal(us, 0)
    return us.astype(np.int32), dict(source="latency-matrix", file=str(path), sites=len(us),
                                     filled_entries=n_missing)


def _is_float(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------------------- CSV edges
def load_edge_csv(path) -> RouterGraph:
    """CSV `src,dst,latency_ms` (optional header; names are any strings). Largest component."""
    path = Path(path)
    names: dict[str, int] = {}
    eu, ev, ms = [], [], []
    for no, line in enumerate(_open_text(path), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        parts = [p.strip() for p in s.split(",")]
        if len(parts) != 3:
            raise TopologyError(f"{path}:{no}: expected 'src,dst,latency_ms', got {s!r}")
        try:
            val = float(parts[2])
        except ValueError:
            if not eu and no == 1 or (not eu and not names):
                continue                   # header
            raise TopologyError(f"{path}:{no}: latency {parts[2]!r} is not a number") from None
        if not (val > 0 and math.isfinite(val)):
            raise TopologyError(f"{path}:{no}: latency must be a positive number, got {parts[2]}")
        if parts[0] == parts[1]:
            raise TopologyError(f"{path}:{no}: self-loop at {parts[0]!r}")
        eu.append(names.setdefault(parts[0], len(names)))
        ev.append(names.setdefault(parts[1], len(names)))
        ms.append(val)
    if not eu:
        raise TopologyError(f"{path}: no edges")
    eu, ev = np.array(eu), np.array(ev)
    remap, n = largest_component(len(names), eu, ev)
    keep = remap[eu] >= 0
    delay = np.maximum(np.rint(np.array(ms)[keep] * 1000), 1)
    return RouterGraph(n, remap[eu[keep]], remap[ev[keep]], delay, name=f"edges-{path.stem}",
                       meta=dict(source="edges", file=str(path), nodes_in_file=len(names)))
