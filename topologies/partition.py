"""Partition routers (and so hosts) into k shards by network locality.

Units are whole domains (a stub domain, or a transit domain's own routers); units are
ordered by region (the transit domain they belong to or hang off) and cut into k
contiguous runs of balanced host weight, so a shard holds whole stubs of few regions and
most host pairs inside a shard are close while pairs across shards are far apart.

The latency between parts (the engine's lookahead, per pair of parts) is computed by
`emulator.latency.RouterLatency.lookahead_matrix_us` from the same dense tables.
"""
from __future__ import annotations

import numpy as np

from .errors import TopologyError
from .topology import Topology


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

