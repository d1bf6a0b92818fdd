"""Partition routers (and so hosts) into k shards by network locality.

When k is at most the number of regions (transit domains with the stubs hanging off them)
and whole regions can be dealt into k parts within `REGION_SLACK` of an even share, each
part is a set of whole regions: every host pair across parts is then at least one
transit-to-transit link apart, which is what sets the engine's lookahead (on ts5050 at
k = 2: 24 ms between whole-region halves against 8 ms when a cut runs through a region,
i.e. a third of the synchronisation windows). Otherwise units are whole domains (a stub
domain, or a transit domain's own routers); units are ordered by region and cut into k
contiguous runs of balanced host weight, so a shard holds whole stubs of few regions and
most host pairs inside a shard are close while pairs across shards are far apart.

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
    whole = _whole_regions(region, weight, k)
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


def _whole_regions(region: np.ndarray, weight: np.ndarray, k: int) -> np.ndarray | None:
    """int32 part per router with every region whole, or None when k exceeds the regions
    or the parts cannot be balanced within REGION_SLACK; O(R + G log G + G k) for G regions.

    Regions are dealt heaviest first, each to the lightest part so far (ties: the lowest
    part), the longest-processing-time rule (at most 4/3 of the best largest part), then
    evened out by moves and swaps (`_even_out`, up to EVEN_OUT_MAX_REGIONS regions)."""
    ids, inverse = np.unique(region, return_inverse=True)
    if k < 2 or len(ids) < k:
        return None
    region_weight = np.bincount(inverse, weights=weight, minlength=len(ids))
    load = np.zeros(k)
    part_of_region = np.empty(len(ids), np.int32)
    for g in np.argsort(-region_weight, kind="stable").tolist():
        p = int(np.argmin(load))
        part_of_region[g] = p
        load[p] += region_weight[g]
    if len(ids) <= EVEN_OUT_MAX_REGIONS:
        _even_out(part_of_region, region_weight, load)
    if load.max() > (1 + REGION_SLACK) * weight.sum() / k or load.min() == 0:
        return None
    return part_of_region[inverse]


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

