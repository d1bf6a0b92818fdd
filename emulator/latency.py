"""Host-to-host latency for the engine: host -> router, router-to-router table, LAN.

The engine only needs a vectorized ``latency(a, b)``, the smallest latency between two
distinct hosts (the grid cell width) and the smallest latency across a partition (the
lookahead). ``RouterLatency`` keeps just the arrays that answer these -- no graph, no routes
-- so it is small to ship to the object store once and read zero-copy by every shard.
"""

from __future__ import annotations

import numpy as np

from . import kernels

# The most memory the shards of a run spend on their own copies of the router table
# (`RouterLatency.for_shard`): e.g. ts5050's 102 MB table is copied up to 10 shards.
PRIVATE_TABLE_BYTES = 1 << 30


class RouterLatency:
    """latency(a, b) = lan + dist[router(a), router(b)] + lan, and 0 for a == b."""

    def __init__(self, host_router, router_dist_us, lan_us: int):
        self.host_router = kernels.read_only(np.ascontiguousarray(host_router, np.int32))
        self.router_dist_us = kernels.read_only(np.ascontiguousarray(router_dist_us, np.int32))
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

    def for_shard(self, n_shards: int) -> RouterLatency:
        """The model a shard of an ``n_shards`` run works with: this one, or one with its
        own copy of the router table when all shards' copies fit in
        ``PRIVATE_TABLE_BYTES``. Why copy: the table arrives zero-copy from Ray's object
        store, shared memory mapped in 4 KiB pages; the protocol kernels look delays up at
        random across it (~100 MB for ts5050's 5,050 routers), so nearly every look-up
        also misses the TLB. numpy gives a large array of its own transparent huge pages
        (2 MiB), on which random look-ups rarely miss it. Many shards on one machine share
        the store's copy instead."""
        if self.router_dist_us.nbytes * max(int(n_shards), 1) > PRIVATE_TABLE_BYTES:
            return self
        return RouterLatency(self.host_router, np.array(self.router_dist_us), self.lan_us)

    @property
    def n_hosts(self) -> int:
        return len(self.host_router)

    def latency(self, a, b) -> np.ndarray:
        """One-way delay (us, int64) between hosts; vectorized, broadcasting; O(len)."""
        # no copies for contiguous int64 arrays of one shape: broadcast_arrays returns them
        # as they are, and ravel / ascontiguousarray / reshape make views
        a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
        return kernels.router_latency(self.host_router, self.router_dist_us, self.lan_us,
                                      np.ascontiguousarray(a.ravel()),
                                      np.ascontiguousarray(b.ravel())).reshape(a.shape)

    def min_latency_us(self) -> int:
        """Smallest latency between two distinct hosts (the grid cell width); O(R^2) at worst."""
        hr = self.host_router
        if len(hr) < 2:
            return 2 * self.lan_us
        counts = np.bincount(hr, minlength=self.router_dist_us.shape[0])
        if counts.max() >= 2:
            return 2 * self.lan_us
        occ = np.flatnonzero(counts)
        sub = self.router_dist_us[np.ix_(occ, occ)].astype(np.int64)
        np.fill_diagonal(sub, np.iinfo(np.int64).max)
        return 2 * self.lan_us + int(sub.min())

    def lookahead_matrix_us(self, host_part) -> np.ndarray:
        """int64[K, K]: entry (i, j) is the smallest latency from a host of part i to a host
        of part j (2 LAN hops when the parts share a router); the diagonal is int64 max.

        Row i bounds how early anything part i sends can reach part j, which is what lets
        each shard run as far ahead as its own senders allow. O(K^2 R) for the shared-router
        test (one boolean matrix product) plus O(R) per router row of the parts that share
        no router with some other part -- O(R^2) for a locality partition, ~0 for round robin.
        """
        host_part = np.asarray(host_part, np.int64)
        parts, part_idx = np.unique(host_part, return_inverse=True)
        k, n_r = len(parts), self.router_dist_us.shape[0]
        never = np.iinfo(np.int64).max
        look = np.full((k, k), never, np.int64)
        if k == 1:
            return look
        members = np.zeros((k, n_r), np.float32)
        members[part_idx, self.host_router] = 1.0
        shared = (members @ members.T) > 0          # parts with a router in common
        two_lan = 2 * self.lan_us
        look[shared] = two_lan
        in_part = members > 0
        for i in range(k):
            far = np.flatnonzero(~shared[i])
            if not len(far):
                continue
            row_min = self.router_dist_us[np.flatnonzero(in_part[i])].min(axis=0)
            for j in far.tolist():
                look[i, j] = two_lan + int(row_min[in_part[j]].min())
        np.fill_diagonal(look, never)
        return look

    def cross_lookahead_us(self, host_part) -> int:
        """Smallest latency between two hosts of different parts (the global lookahead)."""
        return int(self.lookahead_matrix_us(host_part).min())
