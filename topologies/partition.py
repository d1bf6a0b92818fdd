"""Partition routers (and so hosts) into k shards by network locality.

When k is at most the number of regions (transit domains with the stubs hanging off them)
and whole regions can be dealt into k parts within `REGION_SLACK` of an even share, each
part is a set of whole regions: every host pair across parts is then at least one
transit-to-transit link apart, which is what sets the engine's lookahead (on ts5050 at
k = 2: 24 ms between whole-region halves against 8 ms when a cut runs through a region,
i.e. a third of the synchronisation windows). Which regions go together matters as much:
the lookahead is the least latency across the cut, so regions close to each other are
kept in one part where the balance allows (`_spaced_deal`: on ts5050 with 100,000 hosts
at k = 2, 126 ms instead of the 24 ms of a deal by weight alone), under the tightest
balance that keeps most of that distance (REGION_SLACKS); two parts are dealt exactly
(`_two_way_split`). Otherwise units are
whole domains (a stub domain, or a transit domain's own routers); units are ordered by
region and cut into k contiguous runs of balanced host weight, so a shard holds whole
stubs of few regions and most host pairs inside a shard are close while pairs across
shards are far apart. The few pairs of domains that lie close across such a cut are
joined first (`_spaced_units`: single linkage below the largest threshold that keeps the
cut as balanced): on ts5050 with 10,000 hosts the least lookahead at k = 16 is 23 ms
instead of 8, at k = 64 8 ms instead of one 2 ms cell.

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
# a few hundred messages per window (benchmarks/bench_scale.py measures both).
REGION_SLACK = 0.05
# Whole regions are dealt under the tightest of these slacks (the last is REGION_SLACK)
# whose farthest deal keeps at least LOOKAHEAD_KEPT of the lookahead the loosest one
# gets: between two cuts of whole regions (both at least a transit link apart), a few more
# windows cost less than the busiest shard's extra hosts. On ts5050 with 100,000 hosts at
# k = 2 a 1 % slack keeps the parts about 126 ms apart, nearly the 130 ms of a 5 % one
# (benchmarks/bench_scale.py measures the phases at each K).
REGION_SLACKS = (0.01, 0.02, REGION_SLACK)
LOOKAHEAD_KEPT = 0.75
# The deal is evened out by moves and swaps only up to this many regions (transit-stub
# graphs have tens): a round costs O(k^2) numpy calls, and with hundreds of regions (the
# cities of a measured topology) the greedy deal is already close to even.
EVEN_OUT_MAX_REGIONS = 64
# Units (domains) dealt by latency when k exceeds the regions (`_spaced_units`): its
# latency matrix is U x U and its bisection O(log U) deals of O(U log U) each, cheap up to
# a few thousand units (ts5050: ~510 domains); beyond, the contiguous cut by region.
MAX_SPACED_UNITS = 4096


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
    part_of_unit = _quantile_parts(unit_weight, k)
    n_units = len(unit_weight)
    if n_units >= k:
        # guarantee no empty part: units are spread so each part gets at least one
        present = np.unique(part_of_unit)
        if len(present) < k:
            part_of_unit = np.minimum(np.arange(n_units) * k // n_units, k - 1)
    part = np.empty(n, np.int32)
    part[order] = part_of_unit[unit_of_sorted]
    # the same cut over clusters of close units, as balanced as this one at least
    heaviest = np.bincount(part, weights=weight, minlength=k).max()
    spaced = _spaced_units(topo, domain, region, weight, k, heaviest)
    return part if spaced is None else spaced


def _whole_regions(region: np.ndarray, weight: np.ndarray, k: int,
                   region_latency: np.ndarray | None = None) -> np.ndarray | None:
    """int32 part per router with every region whole, or None when k exceeds the regions
    or the parts cannot be balanced within REGION_SLACK; O(R + G log G + G k) for G regions
    by weight alone, times O(log G) deals per slack of REGION_SLACKS when `region_latency`
    is given (`_spaced_deal`).

    Regions are dealt heaviest first, each to the lightest part so far (ties: the lowest
    part), the longest-processing-time rule (at most 4/3 of the best largest part), then
    evened out by moves and swaps (`_even_out`, up to EVEN_OUT_MAX_REGIONS regions). With
    latencies, each slack's cap gets its farthest deal, and the tightest slack whose deal
    keeps LOOKAHEAD_KEPT of the loosest one's least cross-part latency wins."""
    ids, inverse = np.unique(region, return_inverse=True)
    if k < 2 or len(ids) < k:
        return None
    region_weight = np.bincount(inverse, weights=weight, minlength=len(ids))
    share = weight.sum() / k
    by_weight = _deal(region_weight, k, (1 + REGION_SLACK) * share)
    if by_weight is None:
        return None
    if region_latency is None or len(ids) > EVEN_OUT_MAX_REGIONS:
        return by_weight[inverse]
    heaviest = np.bincount(by_weight, weights=region_weight, minlength=k).max()
    deals = []           # (slack, deal, least latency across its parts), tightest first
    for slack in REGION_SLACKS:
        cap = (1 + slack) * share
        if heaviest > cap:
            continue     # (the deal by weight is every spaced deal's starting point)
        deal = _spaced_deal(region_weight, region_latency, k, cap, by_weight)
        deals.append((slack, deal, _least_cross_latency(deal, region_latency)))
    loosest = deals[-1][2]
    deal = next(d for _, d, look in deals if look >= LOOKAHEAD_KEPT * loosest)
    return deal[inverse]


def _least_cross_latency(part_of: np.ndarray, latency: np.ndarray) -> float:
    """The least latency between two units of different parts (+inf with one part);
    O(G^2)."""
    across = part_of[:, None] != part_of[None, :]
    return float(latency[across].min()) if across.any() else float("inf")


def _deal(weight: np.ndarray, k: int, cap: float) -> np.ndarray | None:
    """int32 part per unit, every part non-empty and at most `cap` heavy, or None; the
    longest-processing-time deal, evened out (`_even_out`) up to EVEN_OUT_MAX_REGIONS
    units. O(G log G + G k), plus the evening out."""
    if len(weight) < k:
        return None
    if k == 2 and len(weight) <= EVEN_OUT_MAX_REGIONS and \
            np.array_equal(weight, np.round(weight)):
        part_of = _two_way_split(weight.astype(np.int64))
        if part_of is None or np.bincount(part_of, weights=weight, minlength=2).max() > cap:
            return None
        return part_of
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


def _two_way_split(weight: np.ndarray) -> np.ndarray | None:
    """int32 part (0 or 1) per unit for the most even split of integer weights into two
    non-empty parts (the heavier part as light as it can be), or None when no split
    leaves both parts some weight. Exact: subset sums as bits of Python integers, O(G W)
    bit operations for total weight W (word-parallel; 10^5 hosts over tens of regions is
    a few milliseconds), where the longest-processing-time deal may miss a split within a
    tight cap (on ts5050 at k = 2, 1 % over an even share: 126 ms apart against its 105)."""
    w = weight.tolist()
    total = sum(w)
    sums = [1]                  # bit s of sums[i]: some subset of the first i units weighs s
    for x in w:
        sums.append(sums[-1] | (sums[-1] << x))
    # the lighter part, as heavy as it can be: the highest subset sum up to half
    best = (sums[-1] & ((1 << (total // 2 + 1)) - 1)).bit_length() - 1
    if best <= 0:
        return None
    part_of = np.zeros(len(w), np.int32)
    s = best
    for i in range(len(w), 0, -1):          # back through the units: which make up s
        if not (sums[i - 1] >> s) & 1:
            part_of[i - 1] = 1
            s -= w[i - 1]
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

    # thresholds[0] keeps every region apart
    _, best = _largest_feasible(thresholds, deal_at, 0, fallback)
    return best.astype(np.int32)


def _largest_feasible(thresholds: np.ndarray, attempt, lo: int, best):
    """(i, attempt(thresholds[i])) for the largest i above `lo` whose attempt is not None,
    by bisection (assuming that once an attempt fails, every larger threshold fails too);
    (lo, best) when none. O(log n) attempts."""
    hi = len(thresholds)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        got = attempt(thresholds[mid])
        if got is None:
            hi = mid
        else:
            lo, best = mid, got
    return lo, best


def _spaced_units(topo: Topology, unit: np.ndarray, region: np.ndarray, weight: np.ndarray,
                  k: int, heaviest: float) -> np.ndarray | None:
    """int32 part per router: units (domains, or a heavy domain's routers) joined into
    clusters of those closer than a threshold t, ordered by region and cut into k
    contiguous runs of balanced weight (:func:`_contiguous_cut`), for the largest t at
    which no part is heavier than REGION_SLACK over an even share or `heaviest` (the cut
    of the units alone), whichever is more; None when the topology has
    no dense delay table, more than MAX_SPACED_UNITS units, or no t beats the units alone.
    O(R^2 + U^2 log U) for U units.

    Why: when k exceeds the regions, a cut between stub domains leaves most pairs of parts
    far apart but a few: on ts5050 at k = 64 a transit router and a stub router of
    another domain 1 us apart set the lookahead of their two parts to 2 ms (one cell),
    and every shard then advances at that pair's pace. Joining close units first keeps
    those pairs in one part, and the order by region keeps the parts local (most pairs
    of parts stay far apart, so few of them bound each other's windows)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    ids, inverse = np.unique(unit, return_inverse=True)
    if len(ids) > MAX_SPACED_UNITS:
        return None
    latency = _group_latency(topo, inverse, len(ids))
    if latency is None:
        return None
    unit_weight = np.bincount(inverse, weights=weight, minlength=len(ids))
    unit_region = np.zeros(len(ids), np.int64)
    unit_region[inverse] = region          # (a unit lies in one region)
    cap = max((1 + REGION_SLACK) * weight.sum() / k, heaviest)

    def cut_at(t):
        _, cluster = connected_components(csr_matrix(latency < t), directed=False)
        first_region = np.full(cluster.max() + 1, np.iinfo(np.int64).max)
        np.minimum.at(first_region, cluster, unit_region)
        # clusters ordered by their first region, then by id: whole clusters, contiguous
        order = np.lexsort((cluster, first_region[cluster]))
        part_sorted = _contiguous_cut(unit_weight[order], cluster[order], k, cap)
        if part_sorted is None:
            return None
        part_of_unit = np.empty(len(ids), np.int32)
        part_of_unit[order] = part_sorted
        return part_of_unit

    thresholds = np.unique(latency[np.isfinite(latency)])
    lo, best = _largest_feasible(thresholds, cut_at, -1, None)
    if best is None or lo == 0:             # t = thresholds[0]: every unit alone
        return None
    return best[inverse]


def _contiguous_cut(weight: np.ndarray, group: np.ndarray, k: int,
                    cap: float) -> np.ndarray | None:
    """int32 part per item (items in order; equal consecutive `group` ids stay in one
    part): k contiguous runs, each cut at the group boundary nearest its even-share
    quantile, or None when a part ends empty or heavier than `cap`. O(n log n)."""
    n = len(weight)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    if len(starts) < k:
        return None
    group_weight = np.add.reduceat(weight, starts)
    part_of_group = _quantile_parts(group_weight, k)
    load = np.bincount(part_of_group, weights=group_weight, minlength=k)
    if load.min() == 0 or load.max() > cap:
        return None
    return np.repeat(part_of_group, np.diff(np.r_[starts, n])).astype(np.int32)


def _quantile_parts(weight: np.ndarray, k: int) -> np.ndarray:
    """int64 part per item (items in order) for k contiguous runs of even weight: the
    cumulative-weight quantile of an item's centre decides its part. O(n)."""
    cum = np.cumsum(weight)
    centre = cum - weight / 2
    return np.minimum((centre / cum[-1] * k).astype(np.int64), k - 1)


def _group_latency(topo: Topology, group: np.ndarray, g: int) -> np.ndarray | None:
    """float64[g, g]: the least router-to-router delay between the routers with hosts of
    two groups (``group``: 0..g-1 per router), +inf on the diagonal and for groups without
    hosts; None without a dense delay table. O(R^2), numpy."""
    if not getattr(topo, "is_dense", False):
        return None
    dist = np.asarray(topo.dist_matrix())
    with_hosts = np.zeros(topo.n_routers, bool)
    with_hosts[topo.host_router] = True
    if not with_hosts.any():
        with_hosts[:] = True
    routers = np.flatnonzero(with_hosts)
    order = routers[np.argsort(group[routers], kind="stable")]
    present, starts = np.unique(group[order], return_index=True)
    # least delay from each group to every router, then to every group
    to_router = np.minimum.reduceat(dist[order], starts, axis=0)
    to_group = np.minimum.reduceat(to_router[:, order], starts, axis=1)
    out = np.full((g, g), np.inf)
    out[np.ix_(present, present)] = to_group
    np.fill_diagonal(out, np.inf)
    return out


def _region_latency(topo: Topology, region: np.ndarray) -> np.ndarray | None:
    """float64[G, G] over the regions in sorted id order (np.unique): the least
    router-to-router delay between the routers with hosts of two regions
    (:func:`_group_latency`); None when the topology has no dense delay table or too many
    regions to deal by latency. O(R^2)."""
    ids, inverse = np.unique(region, return_inverse=True)
    if len(ids) > EVEN_OUT_MAX_REGIONS:
        return None
    return _group_latency(topo, inverse, len(ids))


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

