"""`RouterGraph`: the router-level core network as compact numpy arrays.

A RouterGraph is what a generator or a loader produces before end hosts are attached:
undirected core edges with a delay (integer microseconds), an optional routing-policy
weight per edge (GT-ITM), and per-router structure (domain, transit flag, region, position).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import TopologyError

# Edge classes (int8 codes in `edge_class`).
INTRA_TRANSIT, INTRA_STUB, TRANSIT_TRANSIT, TRANSIT_STUB, STUB_STUB, MEASURED = range(6)
EDGE_CLASS_NAMES = ("intra_transit", "intra_stub", "transit_transit", "transit_stub",
                    "stub_stub", "measured")


@dataclass
class RouterGraph:
    """Undirected router graph; edge e joins `edge_src[e]` and `edge_dst[e]`.

    Edges keep their input order and orientation; parallel edges collapse to one.

    `edge_policy` is None for delay-based routing (measured maps), else the int32 GT-ITM
    policy weight of each edge. `router_xy` is the plane position (GT-ITM grid units, or
    (longitude, latitude) for measured maps), or None when unknown.
    """
    n_routers: int
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_delay_us: np.ndarray
    edge_policy: np.ndarray | None = None
    edge_class: np.ndarray | None = None
    router_domain: np.ndarray | None = None
    router_is_transit: np.ndarray | None = None
    router_region: np.ndarray | None = None
    router_xy: np.ndarray | None = None
    name: str = "graph"
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        n = int(self.n_routers)
        if n < 1:
            raise TopologyError(f"a router graph needs at least one router, got {n}")
        self.n_routers = n
        src = np.asarray(self.edge_src, dtype=np.int64).ravel()
        dst = np.asarray(self.edge_dst, dtype=np.int64).ravel()
        delay = np.asarray(self.edge_delay_us).ravel()
        if not (len(src) == len(dst) == len(delay)):
            raise TopologyError(f"edge arrays differ in length: src {len(src)}, dst {len(dst)}, "
                                f"delay {len(delay)}")
        if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
            raise TopologyError(f"edge endpoint outside 0..{n - 1}")
        if np.any(src == dst):
            raise TopologyError(f"self-loop at router {int(src[src == dst][0])}")
        if len(delay) and (not np.all(np.isfinite(delay)) or delay.min() <= 0):
            raise TopologyError("edge delays must be positive finite microseconds")
        delay = np.rint(delay).astype(np.int64)
        policy = (None if self.edge_policy is None
                  else np.asarray(self.edge_policy, np.int64).ravel())
        if policy is not None and (len(policy) != len(src) or (len(policy) and policy.min() < 1)):
            raise TopologyError("edge_policy must give a weight >= 1 for every edge")
        eclass = (np.full(len(src), MEASURED, np.int8) if self.edge_class is None
                  else np.asarray(self.edge_class, np.int8).ravel())
        # canonical orientation u < v; parallel edges collapse to the one with the smallest
        # (policy, delay) -- the only one a shortest-path route could use
        lo, hi = np.minimum(src, dst), np.maximum(src, dst)
        pol_key = policy if policy is not None else np.zeros_like(delay)
        order = np.lexsort((delay, pol_key, hi, lo))
        lo, hi = lo[order], hi[order]
        keep = np.ones(len(lo), bool)
        keep[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
        idx = np.sort(order[keep])          # input order and orientation are kept
        self.edge_src = src[idx].astype(np.int32)
        self.edge_dst = dst[idx].astype(np.int32)
        self.edge_delay_us = delay[idx]
        self.edge_policy = None if policy is None else policy[idx].astype(np.int32)
        self.edge_class = eclass[idx]
        self.router_domain = (np.zeros(n, np.int32) if self.router_domain is None
                              else np.asarray(self.router_domain, np.int32))
        self.router_is_transit = (np.zeros(n, bool) if self.router_is_transit is None
                                  else np.asarray(self.router_is_transit, bool))
        self.router_region = (self.router_domain.copy() if self.router_region is None
                              else np.asarray(self.router_region, np.int32))
        for nm in ("router_domain", "router_is_transit", "router_region"):
            if len(getattr(self, nm)) != n:
                raise TopologyError(f"{nm} has {len(getattr(self, nm))} entries, expected {n}")
        if self.router_xy is not None:
            self.router_xy = np.asarray(self.router_xy, np.float64).reshape(n, 2)

    @property
    def n_edges(self) -> int:
        return len(self.edge_src)
