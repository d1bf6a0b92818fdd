"""GT-ITM "ts" transit-stub generator, reimplemented from the published algorithm.

See docs/topologies.md and ../shared/notes/gt-itm.md. Per seed reproducible: all draws come
from one numpy Generator seeded with `seed`, in the order GT-ITM makes them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, shortest_path

from .errors import TopologyError
from .graph import INTRA_STUB, INTRA_TRANSIT, STUB_STUB, TRANSIT_STUB, TRANSIT_TRANSIT, RouterGraph

OVERALL_DENSITY_FACTOR = 80.0
STUB_DENSITY_FACTOR = 16.0
TRANSIT_SPREAD = 0.5
RANDMULT = 3
PURE_RANDOM, WAXMAN = 3, 2
MAX_TRIES = 100_000


@dataclass(frozen=True)
class GeoParams:
    """One level of the hierarchy: `n` nodes, edge method (3 pure random, 2 Waxman)."""
    n: int
    method: int = PURE_RANDOM
    alpha: float = 0.5
    beta: float = 0.0


@dataclass(frozen=True)
class TransitStubSpec:
    """GT-ITM ts spec: top level (transit domains), transit domains, stub domains."""
    top: GeoParams
    transit: GeoParams
    stub: GeoParams
    stubs_per_transit: int
    extra_ts: int = 0
    extra_ss: int = 0

    @property
    def n_routers(self) -> int:
        return self.top.n * self.transit.n * (self.stubs_per_transit * self.stub.n + 1)

    def validate(self) -> None:
        for nm, lv in (("top", self.top), ("transit", self.transit), ("stub", self.stub)):
            if lv.n < 1:
                raise TopologyError(f"{nm} level needs n >= 1, got {lv.n}")
            if lv.method not in (PURE_RANDOM, WAXMAN):
                raise TopologyError(f"{nm} level: edge method {lv.method} unsupported "
                                    "(3 pure random, 2 Waxman)")
            if not 0 < lv.alpha <= 1:
                raise TopologyError(f"{nm} level: alpha must be in (0, 1], got {lv.alpha}")
            if lv.method == WAXMAN and lv.beta <= 0:
                raise TopologyError(f"{nm} level: Waxman needs beta > 0")
        if self.stubs_per_transit < 1:
            raise TopologyError("stubs_per_transit must be >= 1")
        if self.extra_ts < 0 or self.extra_ss < 0:
            raise TopologyError("extra edge counts must be >= 0")


PRESETS = {
    # 10 x 5 x (10 x 10 + 1) = 5050 routers (the published setup), pure random edges
    "ts5050": TransitStubSpec(top=GeoParams(10, PURE_RANDOM, 0.5),
                              transit=GeoParams(5, PURE_RANDOM, 0.6),
                              stub=GeoParams(10, PURE_RANDOM, 0.42), stubs_per_transit=10),
    # GT-ITM's own sample graphs/ts/ts600: 3 x 8 x (3 x 8 + 1) = 600
    "ts600": TransitStubSpec(top=GeoParams(3, PURE_RANDOM, 1.0),
                             transit=GeoParams(8, PURE_RANDOM, 0.5),
                             stub=GeoParams(8, PURE_RANDOM, 0.5), stubs_per_transit=3),
}


def derived_scales(spec: TransitStubSpec) -> tuple[int, int, int]:
    """(global, transit, stub) grid scales as GT-ITM derives them for ts graphs."""
    max_t = spec.transit.n + RANDMULT * spec.top.n
    max_stubs = spec.stubs_per_transit + RANDMULT * max_t
    max_stub_nodes = spec.stub.n + RANDMULT * max_stubs
    glob = int(np.rint(np.sqrt(spec.n_routers * OVERALL_DENSITY_FACTOR)))
    transit = int(np.rint(glob * TRANSIT_SPREAD))
    transit += transit & 1
    stub = int(np.rint(np.sqrt(max_stub_nodes * STUB_DENSITY_FACTOR)))
    if stub >= glob:
        raise TopologyError(f"stub scale {stub} >= global scale {glob}: spec too small")
    return glob, transit, stub


def randomize_sizes(rng: np.random.Generator, count: int, mean: int, iterations: int):
    """`count` sizes starting at `mean`; `iterations` times move one unit from a random
    entry above 1 to a random entry. Sum preserved exactly, entries stay >= 1. O(iter)."""
    sizes = np.full(count, mean, np.int64)
    picks = rng.integers(0, count, size=(iterations, 2))
    for i, j in picks:
        if sizes[i] > 1:
            sizes[i] -= 1
            sizes[j] += 1
    return sizes


def _is_connected(n, u, v) -> bool:
    if n == 1:
        return True
    m = csr_matrix((np.ones(len(u)), (u, v)), shape=(n, n))
    return connected_components(m, directed=False)[0] == 1


def hop_diameter(n, u, v) -> int:
    """Largest hop count of a shortest path (unweighted); O(n (n + E))."""
    if n == 1:
        return 0
    m = csr_matrix((np.ones(len(u)), (u, v)), shape=(n, n))
    return int(shortest_path(m, directed=False, unweighted=True).max())


def flat_random_graph(rng: np.random.Generator, params: GeoParams, scale: int):
    """GT-ITM geo graph, regenerated until connected.

    n nodes on distinct integer points of [0, scale)^2; each pair an edge with
    probability alpha (pure random) or alpha * exp(-d / (beta * sqrt(2) * scale)) (Waxman).
    Returns (xy int64[n, 2], u, v, length int64) with u < v. O(n^2) per attempt.
    """
    n = params.n
    if n > scale * scale:
        raise TopologyError(f"{n} nodes do not fit on a {scale} x {scale} grid")
    iu, iv = np.triu_indices(n, 1)
    for _ in range(MAX_TRIES):
        cells = rng.choice(scale * scale, size=n, replace=False)
        xy = np.stack([cells // scale, cells % scale], axis=1).astype(np.int64)
        d = np.hypot(*(xy[iu] - xy[iv]).T.astype(np.float64))
        if params.method == PURE_RANDOM:
            p = np.full(len(iu), params.alpha)
        else:
            p = params.alpha * np.exp(-d / (params.beta * np.sqrt(2.0) * scale))
        keep = rng.random(len(iu)) < p
        u, v = iu[keep], iv[keep]
        if _is_connected(n, u, v):
            return xy, u, v, np.rint(d[keep]).astype(np.int64)
    raise TopologyError(f"no connected {n}-node graph after {MAX_TRIES} tries "
                        f"(alpha {params.alpha} too small?)")


@dataclass
class _Placement:
    """Routers placed so far, domain by domain, and the edges inside the domains (lists of
    per-domain arrays; an edge list's length entry None means "Euclidean, computed later")."""
    xy: list = field(default_factory=list)
    domain: list = field(default_factory=list)
    is_transit: list = field(default_factory=list)
    region: list = field(default_factory=list)
    eu: list = field(default_factory=list)
    ev: list = field(default_factory=list)
    elen: list = field(default_factory=list)
    ecls: list = field(default_factory=list)
    transit_ids: list = field(default_factory=list)   # per domain: its transit routers
    stub_of: list = field(default_factory=list)       # per stub: (transit id, first id, size)
    n_routers: int = 0
    n_stub_domains: int = 0
    transit_diam: int = 0
    stub_diam: int = 0

    def add_nodes(self, xy, domain, is_transit, region) -> int:
        """Append routers; returns the global id of the first."""
        first = self.n_routers
        self.xy.append(xy)
        self.domain.append(np.full(len(xy), domain, np.int32))
        self.is_transit.append(np.full(len(xy), is_transit, bool))
        self.region.append(np.full(len(xy), region, np.int32))
        self.n_routers += len(xy)
        return first

    def add_edges(self, u, v, length, edge_class) -> None:
        self.eu.append(np.asarray(u, np.int64))
        self.ev.append(np.asarray(v, np.int64))
        self.elen.append(length)
        self.ecls.append(np.full(len(u), edge_class, np.int8))


def _place_transit_domain(rng, spec, place, dom, top_xy, size, glob, tscale, sscale) -> None:
    """Transit domain ``dom`` (``size`` routers) near its top-level point, then the stub
    domains of each of its transit routers. O(sum of n^2 over the domains placed)."""
    xoff, yoff = top_xy[dom] - tscale // 2
    xoff = min(max(xoff, 0), glob - tscale)
    yoff = min(max(yoff, 0), glob - tscale)
    txy, u, v, ln = flat_random_graph(rng, replace(spec.transit, n=int(size)), tscale)
    place.transit_diam = max(place.transit_diam, hop_diameter(len(txy), u, v))
    txy = txy + np.array([xoff, yoff])
    n_stubs = randomize_sizes(rng, len(txy), spec.stubs_per_transit, RANDMULT * len(txy))
    first_t = place.add_nodes(txy, dom, True, dom)
    place.transit_ids.append(np.arange(first_t, first_t + len(txy)))
    place.add_edges(u + first_t, v + first_t, ln, INTRA_TRANSIT)
    for k in range(len(txy)):
        _place_stub_domains(rng, spec, place, dom, first_t + k, txy[k], int(n_stubs[k]),
                            glob, sscale)


def _place_stub_domains(rng, spec, place, dom, transit_id, txy, count, glob, sscale) -> None:
    """``count`` stub domains hanging off transit router ``transit_id`` at ``txy``."""
    tx, ty = txy
    minx, miny = max(tx - sscale, 0), max(ty - sscale, 0)
    maxx = tx if tx + sscale <= glob else glob - sscale
    maxy = ty if ty + sscale <= glob else glob - sscale
    stub_sizes = randomize_sizes(rng, count, spec.stub.n, RANDMULT * count)
    for size in stub_sizes:
        sxy, su, sv, sln = flat_random_graph(rng, replace(spec.stub, n=int(size)), sscale)
        gx = minx + (rng.integers(maxx - minx) if maxx > minx else 0)
        gy = miny + (rng.integers(maxy - miny) if maxy > miny else 0)
        place.stub_diam = max(place.stub_diam, hop_diameter(len(sxy), su, sv))
        # stub domain ids follow the transit domains' (0..T-1)
        first_s = place.add_nodes(sxy + np.array([gx, gy]), spec.top.n + place.n_stub_domains,
                                  False, dom)
        place.n_stub_domains += 1
        place.add_edges(su + first_s, sv + first_s, sln, INTRA_STUB)
        place.stub_of.append((transit_id, first_s, len(sxy)))


def _add_inter_domain_edges(rng, spec, place, tu, tv, is_transit, domain) -> None:
    """The edges between domains, drawn in GT-ITM's order: stub attachments, transit-
    transit links along the top-level edges, extra transit-stub and stub-stub edges."""
    n_top, base = spec.top.n, place.n_routers
    # stub attachment: one edge from the transit router to a random router of the stub
    att = np.array(place.stub_of, np.int64).reshape(-1, 3)
    picks = rng.integers(0, 2 ** 62, size=len(att)) % att[:, 2]
    place.add_edges(att[:, 0], att[:, 1] + picks, None, TRANSIT_STUB)
    # inter-domain links: each top-level edge visited from both of its ends
    adj_from = np.concatenate([tu, tv])
    adj_to = np.concatenate([tv, tu])
    order = np.argsort(adj_from, kind="stable")
    ia, ib = [], []
    for a, b in zip(adj_from[order], adj_to[order], strict=True):
        ia.append(place.transit_ids[a][rng.integers(len(place.transit_ids[a]))])
        ib.append(place.transit_ids[b][rng.integers(len(place.transit_ids[b]))])
    place.add_edges(np.array(ia, np.int64), np.array(ib, np.int64), None, TRANSIT_TRANSIT)
    # extra transit-stub edges: a random transit router and a stub router not under it
    stub_parent = np.full(base, -1, np.int64)
    for t, f, s in place.stub_of:
        stub_parent[f:f + s] = t
    xa, xb = [], []
    for _ in range(spec.extra_ts):
        d = rng.integers(n_top)
        t = place.transit_ids[d][rng.integers(len(place.transit_ids[d]))]
        for _ in range(MAX_TRIES):
            s = rng.integers(base)
            if not is_transit[s] and stub_parent[s] != t:
                break
        else:
            raise TopologyError("no stub router available for an extra transit-stub edge")
        xa.append(t)
        xb.append(s)
    place.add_edges(np.array(xa, np.int64), np.array(xb, np.int64), None, TRANSIT_STUB)
    # extra stub-stub edges between different stub domains
    ya, yb = [], []
    for _ in range(spec.extra_ss):
        for _ in range(MAX_TRIES):
            a, b = rng.integers(base), rng.integers(base)
            if not is_transit[a] and not is_transit[b] and domain[a] != domain[b]:
                break
        else:
            raise TopologyError("no stub router pair available for an extra stub-stub edge")
        ya.append(a)
        yb.append(b)
    place.add_edges(np.array(ya, np.int64), np.array(yb, np.int64), None, STUB_STUB)


def policy_weights(top_diam: int, transit_diam: int, stub_diam: int) -> tuple[int, int, int]:
    """GT-ITM's routing-policy weights (transit-transit, transit-stub, stub-stub) from the
    hop diameters: large enough that a route never crosses a stub domain as transit."""
    w_tt = transit_diam // 2 + 1
    w_ts = (top_diam * w_tt) // 2 + 1 + ((top_diam + 1) * transit_diam) // 2 + 1
    w_ss = stub_diam + 2 * w_ts
    return w_tt, w_ts, w_ss


def generate_transit_stub(preset: str | None = None, seed: int = 0,
                          spec: TransitStubSpec | None = None) -> RouterGraph:
    """Generate a GT-ITM transit-stub router graph (delay in ms = edge length).

    Router order follows GT-ITM: per transit domain, its transit routers, then for each
    of them its stub domains. Domains: transit domain t has id t; stubs get ids T, T+1, ...
    Time roughly O(sum of n^2 over domains + one hop-diameter per domain).
    """
    if spec is None:
        if preset not in PRESETS:
            raise TopologyError(f"unknown transit-stub preset {preset!r}; "
                                f"known: {', '.join(PRESETS)}")
        spec = PRESETS[preset]
    spec.validate()
    rng = np.random.default_rng(seed)
    glob, tscale, sscale = derived_scales(spec)
    n_top = spec.top.n

    top_xy, tu, tv, _ = flat_random_graph(rng, spec.top, glob)
    top_diam = hop_diameter(n_top, tu, tv)
    domain_sizes = randomize_sizes(rng, n_top, spec.transit.n, RANDMULT * n_top)
    place = _Placement()
    for dom in range(n_top):
        _place_transit_domain(rng, spec, place, dom, top_xy, domain_sizes[dom], glob, tscale,
                              sscale)
    base = place.n_routers
    if base != spec.n_routers:
        raise TopologyError(f"internal: placed {base} routers, expected {spec.n_routers}")
    xy = np.concatenate(place.xy)
    domain = np.concatenate(place.domain)
    is_transit = np.concatenate(place.is_transit)
    region = np.concatenate(place.region)
    w_tt, w_ts, w_ss = policy_weights(top_diam, place.transit_diam, place.stub_diam)
    _add_inter_domain_edges(rng, spec, place, tu, tv, is_transit, domain)

    u = np.concatenate(place.eu).astype(np.int64)
    v = np.concatenate(place.ev).astype(np.int64)
    cls = np.concatenate(place.ecls)
    # cross-domain lengths: rounded Euclidean distance in the global plane
    length = np.concatenate([ln if ln is not None else
                             np.rint(np.hypot(*(xy[a] - xy[b]).T.astype(float))).astype(np.int64)
                             for ln, a, b in zip(place.elen, place.eu, place.ev, strict=True)])
    policy = np.select([cls == TRANSIT_TRANSIT, cls == TRANSIT_STUB, cls == STUB_STUB],
                       [w_tt, w_ts, w_ss], 1)
    # a zero-length cross-domain edge (coinciding points) keeps a 1 us delay
    delay_us = np.maximum(length * 1000, 1)
    meta = dict(generator="gt-itm-ts", seed=int(seed), preset=preset,
                scales=[glob, tscale, sscale], top_diam=top_diam,
                transit_diam=place.transit_diam, stub_diam=place.stub_diam, w_tt=int(w_tt),
                w_ts=int(w_ts), w_ss=int(w_ss), n_transit_domains=n_top,
                n_stub_domains=int(place.n_stub_domains))
    return RouterGraph(base, u, v, delay_us, edge_policy=policy, edge_class=cls,
                       router_domain=domain, router_is_transit=is_transit,
                       router_region=region, router_xy=xy.astype(np.float64),
                       name=preset or "transit-stub", meta=meta)
