"""Host-to-host latency for the engine: host -> router, router-to-router table, LAN.

The engine only needs a vectorized ``latency(a, b)``, the smallest latency between two
distinct hosts (the grid cell width) and the smallest latency across a partition (the
lookahead). ``RouterLatency`` keeps just the arrays that answer these -- no graph, no routes
-- so it is small to ship to the object store once and read zero-copy by every shard.
"""

from __future__ import annotations

import numpy as np

from . import kernels


class RouterLatency:
    """latency(a, b) = lan + dist[router(a), router(b)] + lan, and 0 for a == b."""

    def __init__(self, host_router, router_dist_us, lan_us: int):
        self.host_router = np.ascontiguousarray(host_router, np.int32)
        self.router_dist_us = np.ascontiguousarray(router_dist_us, np.int32)
        self.lan_us = int(lan_us)
        r = self.router_dist_us.shape
        if len(r) != 2 or r[0] != r[1]:
            raise ValueError(f"router_dist_us must be a square matrix, got shape {r}")
        if len(self.host_router) and (self.host_router.min() < 0 or self.host_router.max() >= r[0]):
            raise ValueError("host_router names a router outside the distance table")
        if self.lan_us < 0:
            raise ValueError("lan_us must be >= 0")

    @classmethod
    def from_topology(cls, topo) -> RouterLatency:
        """From a topologies.Topology with dense tables (transit-stub, measured matrices)."""
        return cls(topo.host_router, topo.dist_matrix(), topo.lan_us)

    @property
    def n_hosts(self) -> int:
        return len(self.host_router)

    def latency(self, a, b) -> np.ndarray:
        """One-way delay (us, int64) between hosts; vectorized, broadcasting; O(len)."""
        a = np.asarray(a, np.int64)
        b = np.asarray(b, np.int64)
        if a.ndim == 1 and a.shape == b.shape:  # the common case, compiled
            return kernels.router_latency(self.host_router, self.router_dist_us, self.lan_us,
                                          a, b)
        hr = self.host_router
        d = self.router_dist_us[hr[a], hr[b]].astype(np.int64) + 2 * self.lan_us
        return np.where(a == b, 0, d)

    def min_latency_us(self) -> int:
        """Smallest latency between two distinct hosts; O(R^2) at worst."""
        return self.cross_lookahead_us(np.arange(self.n_hosts))

    def cross_lookahead_us(self, host_part) -> int:
        """Smallest latency between two hosts of different parts; O(K R^2) for K parts.

        With a single part every host pair counts (the cell width).
        """
        host_part = np.asarray(host_part, np.int64)
        hr = self.host_router.astype(np.int64)
        n_r = self.router_dist_us.shape[0]
        parts = np.unique(host_part)
        two_lan = 2 * self.lan_us
        if len(parts) == 1 and len(host_part) >= 2:
            counts = np.bincount(hr, minlength=n_r)
            if counts.max() >= 2:
                return two_lan
            occ = np.flatnonzero(counts)
            sub = self.router_dist_us[np.ix_(occ, occ)].astype(np.int64)
            np.fill_diagonal(sub, np.iinfo(np.int64).max)
            return two_lan + int(sub.min())
        members = np.zeros((len(parts), n_r), bool)
        members[np.searchsorted(parts, host_part), hr] = True
        if (members.sum(0) > 1).any():  # two parts share a router
            return two_lan
        best = np.iinfo(np.int64).max
        for k in range(len(parts)):
            rows = np.flatnonzero(members[k])
            cols = np.flatnonzero(members.any(0) & ~members[k])
            if len(rows) and len(cols):
                best = min(best, int(self.router_dist_us[np.ix_(rows, cols)].min()))
        return two_lan + best
