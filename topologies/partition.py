"""Partition routers (and so hosts) into k shards by network locality.

When k is at most the number of regions (transit domains with the stubs hanging off them)
and whole regions can be dealt into k parts within `REGION_SLACK` of an even share, each
part is a set of whole regions: every host pair across parts is then at least one
transit-to-transit link apart, which is what sets the engine's lookahead (on ts5050 at
k = 2: 24 ms between whole-region halves against 8 ms when a cut runs through a region,
i.e. a third of the synchronisation windows). Which regions go together matters as much:
the lookahead is the least latency across the cut, so regions close to each other are
kept in one part where the balance allows (`_spaced_deal`: on ts5050 with 100,000 hosts
at k = 2, 130 ms instead of the 24 ms of a deal by weight alone). Otherwise units are
whole domains (a stub domain, or a transit domain's own routers); units are ordered by
region and cut into k contiguous runs of balanced host weight, so a shard holds whole
stubs of few regions and most host pairs inside a shard are close while pairs across
shards are far apart.

The latency between parts (the engine's lookahead, per pair of parts) is computed by
`emulator.latency.RouterLatency.lookahead_matrix_us` from the same dense tables.
"""
from __future__ import annotations

import numpy as np

from .errors import TopologyError
from .topology import Topology

# How much heavier than an even share (1/k of the hosts) a part of whole regions may be.
# A part 5 % over its share costs at most 5 % of a phase's parallel time; a cut through a
# region costs windows (3x as many on ts5050 at k = 2), which costs far more on traffic of
# a few hundred messages per window (BENCHMARKS.md, issue 15).
REGION_SLACK = 0.05
# The deal is evened out by moves and swaps only up to this many regions (transit-stub
# graphs have tens): a round costs O(k^2) numpy calls, and with hundreds of regions (the
# cities of a measured topology) the greedy deal is already close to even.
EVEN_OUT_MAX_REGIONS = 64


def partition_routers(topo: Topology, k: int, hosts_weight=None) -> np.ndarray:
    """int32 part (0..k-1) per router; O(R log R).

    hosts_weight: optional weight per router (default: number of hosts on it). Parts are
    balanced by weight at unit granularity. A domain heavier than a part's share (k larger
    than the number of stub domains can balance) is split into its routers, so every
    other domain stays whole; when there are still fewer units than k, single routers
    become the units.
    """
    k = int(k)
    n = topo.n_routers
    if k < 1:
        raise TopologyError(f"k must be >= 1, got {k}")
    if hosts_weight is None:
        weight = np.bincount(topo.host_router, minlength=n).astype(np.float64)
    else:
        weight = np.asarray(hosts_weight, np.float64)
        if weight.shape != (n,) or (weight < 0).any():
            raise TopologyError(f"hosts_weight must be {n} non-negative numbers")
    if weight.sum() == 0:
        weight = np.ones(n)
    domain = topo.router_domain.astype(np.int64)
    region = topo.router_region.astype(np.int64)
    whole = _whole_regions(region, weight, k, _region_latency(topo, region))
    if whole is not None:
        return whole
    domain = _split_heavy_domains(domain, weight, k)
    if len(np.unique(domain)) < k:
        domain = np.arange(n, dtype=np.int64)
    # units ordered by (region, domain); routers keep their unit's rank
    order = np.lexsort((domain, region))
    unit_start = np.ones(n, bool)
    unit_start[1:] = (domain[order][1:] != domain[order][:-1]) | \
                     (region[order][1:] != region[order][:-1])
    unit_of_sorted = np.cumsum(unit_start) - 1
    unit_weight = np.bincount(unit_of_sorted, weights=weight[order])
    # cut at cumulative-weight quantiles, unit centre decides its part
    cum = np.cumsum(unit_weight)
    centre = cum - unit_weight / 2
    part_of_unit = np.minimum((centre / cum[-1] * k).astype(np.int64), k - 1)
    n_units = len(unit_weight)
    if n_units >= k:
        # guarantee no empty part: units are spread so each part gets at least one
        present = np.unique(part_of_unit)
        if len(present) < k:
            part_of_unit = np.minimum(np.arange(n_units) * k // n_units, k - 1)
    part = np.empty(n, np.int32)
    part[order] = part_of_unit[unit_of_sorted]
    return part


def _whole_regions(region: np.ndarray, weight: np.ndarray, k: int,
                   region_latency: np.ndarray | None = None) -> np.ndarray | None:
    """int32 part per router with every region whole, or None when k exceeds the regions
    or the parts cannot be balanced within REGION_SLACK; O(R + G log G + G k) for G regions
    by weight alone, times O(log G) deals when `region_latency` is given (`_spaced_deal`).

    Regions are dealt heaviest first, each to the lightest part so far (ties: the lowest
    part), the longest-processing-time rule (at most 4/3 of the best largest part), then
    evened out by moves and swaps (`_even_out`, up to EVEN_OUT_MAX_REGIONS regions)."""
    ids, inverse = np.unique(region, return_inverse=True)
    if k < 2 or len(ids) < k:
        return None
    region_weight = np.bincount(inverse, weights=weight, minlength=len(ids))
    cap = (1 + REGION_SLACK) * weight.sum() / k
    part_of_region = _deal(region_weight, k, cap)
    if part_of_region is None:
        return None
    if region_latency is not None and len(ids) <= EVEN_OUT_MAX_REGIONS:
        part_of_region = _spaced_deal(region_weight, region_latency, k, cap, part_of_region)
    return part_of_region[inverse]


def _deal(weight: np.ndarray, k: int, cap: float) -> np.ndarray | None:
    """int32 part per unit, every part non-empty and at most `cap` heavy, or None; the
    longest-processing-time deal, evened out (`_even_out`) up to EVEN_OUT_MAX_REGIONS
    units. O(G log G + G k), plus the evening out."""
    if len(weight) < k:
        return None
    load = np.zeros(k)
    part_of = np.empty(len(weight), np.int32)
    for g in np.argsort(-weight, kind="stable").tolist():
        p = int(np.argmin(load))
        part_of[g] = p
        load[p] += weight[g]
    if len(weight) <= EVEN_OUT_MAX_REGIONS:
        _even_out(part_of, weight, load)
    if load.max() > cap or load.min() == 0:
        return None
    return part_of


def _spaced_deal(weight: np.ndarray, latency: np.ndarray, k: int, cap: float,
                 fallback: np.ndarray) -> np.ndarray:
    """int32 part per region that keeps regions closer than some threshold t together, for
    the largest t at which the clusters so formed still deal into k parts under `cap`;
    `fallback` (the deal by weight) when none beats it. O(G^2 log G) plus O(log G) deals.

    Every pair of regions in different parts is then at least t apart, and t is the
    engine's lookahead between those parts: this is single-linkage clustering (which
    maximizes the least distance between clusters) with a weight cap. The threshold is
    found by bisection over the distinct latencies, assuming a coarser clustering never
    deals more evenly (true of the exact optimum; the greedy deal may rarely miss a larger
    feasible t, never return an infeasible one)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    g = len(weight)
    lat = np.asarray(latency, np.float64)
    thresholds = np.unique(lat[np.triu_indices(g, 1)])

    def deal_at(t):
        _, cluster = connected_components(csr_matrix(lat < t), directed=False)
        part_of_cluster = _deal(np.bincount(cluster, weights=weight), k, cap)
        return None if part_of_cluster is None else part_of_cluster[cluster]

    lo, hi, best = 0, len(thresholds), fallback      # thresholds[0] keeps every region apart
    while hi - lo > 1:
        mid = (lo + hi) // 2
        part_of = deal_at(thresholds[mid])
        if part_of is None:
            hi = mid
        else:
            lo, best = mid, part_of
    return best.astype(np.int32)


def _region_latency(topo: Topology, region: np.ndarray) -> np.ndarray | None:
    """float64[G, G] over the regions in sorted id order (np.unique): the least
    router-to-router delay between the routers with hosts of two regions (what the
    lookahead between them adds to its two LAN hops), +inf on the diagonal; None when the
    topology has no dense delay table or too many regions to deal by latency. O(R^2)."""
    if not getattr(topo, "is_dense", False):
        return None
    ids = np.unique(region)
    if len(ids) > EVEN_OUT_MAX_REGIONS:
        return None
    dist = topo.dist_matrix()
    with_hosts = np.zeros(topo.n_routers, bool)
    with_hosts[topo.host_router] = True
    if not with_hosts.any():
        with_hosts[:] = True
    g = len(ids)
    out = np.full((g, g), np.inf)
    rows = [np.flatnonzero(with_hosts & (region == r)) for r in ids.tolist()]
    nearest = [dist[r].min(axis=0) if len(r) else None for r in rows]
    for i in range(g):
        for j in range(g):
            if i != j and nearest[i] is not None and len(rows[j]):
                out[i, j] = float(nearest[i][rows[j]].min())
    return out


def _even_out(part_of: np.ndarray, weight: np.ndarray, load: np.ndarray,
              rounds: int = 500) -> None:
    """Even out parts by the best single move or swap of regions between two parts, while
    one lowers the sum of squared loads; in place. Each round tries every pair of parts:
    O(G^2) for G regions; a few dozen rounds on transit-stub graphs (tens of regions)."""
    k = len(load)
    for _ in range(rounds):
        best_gain, best_move = 1e-9, None
        members = [np.flatnonzero(part_of == p) for p in range(k)]
        for p in range(k):
            for q in range(k):
                gap = load[p] - load[q]
                if gap <= 0:
                    continue
                theirs = np.concatenate(([-1], members[q]))
                w_theirs = np.where(theirs >= 0, weight[np.maximum(theirs, 0)], 0.0)
                d = weight[members[p]][:, None] - w_theirs[None, :]    # what p gives q
                gain = d * (gap - d)              # half the fall of the squared loads
                i, j = np.unravel_index(np.argmax(gain), gain.shape)
                if gain[i, j] > best_gain:
                    best_gain = gain[i, j]
                    best_move = (p, q, int(members[p][i]), int(theirs[j]), d[i, j])
        if best_move is None:
            return
        p, q, a, b, d = best_move
        part_of[a] = q
        if b >= 0:
            part_of[b] = p
        load[p] -= d
        load[q] += d


def _split_heavy_domains(domain: np.ndarray, weight: np.ndarray, k: int) -> np.ndarray:
    """Domain ids where each domain heavier than 1/k of the total weight is replaced by one
    new id per router (the routers keep their region, so they stay together); O(R)."""
    ids, inverse = np.unique(domain, return_inverse=True)
    dom_weight = np.bincount(inverse, weights=weight, minlength=len(ids))
    heavy = dom_weight[inverse] > weight.sum() / k
    if not heavy.any():
        return domain
    out = domain.copy()
    out[heavy] = int(domain.max()) + 1 + np.flatnonzero(heavy)
    return out

