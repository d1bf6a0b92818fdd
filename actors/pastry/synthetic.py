"""A small synthetic network for Pastry tests and benchmarks when no topology is at hand.

Routers are points on a plane; the core delay between two routers is their Euclidean
distance (a metric, as shortest-path delays are); hosts attach to uniformly chosen
routers with a LAN delay. Real runs use ``topologies/`` (transit-stub or measured maps).
"""

from __future__ import annotations

import numpy as np

from .ids import node_ids


def synthetic_network(n_hosts: int, n_routers: int, seed: int, *, span_us: int = 100_000,
                      lan_us: int = 1000) -> dict:
    """Shared inputs of the Pastry stack: ids, host_router, router_dist_us, lan_us.

    O(n_routers^2) memory for the distance matrix (int32 us).
    """
    if n_hosts < 1 or n_routers < 1:
        raise ValueError("synthetic_network: need at least one host and one router")
    rng = np.random.default_rng(seed)
    xy = rng.random((n_routers, 2)) * span_us
    d = np.sqrt(((xy[:, None, :] - xy[None, :, :]) ** 2).sum(-1))
    router_dist = np.rint(d).astype(np.int32)
    host_router = rng.integers(0, n_routers, size=n_hosts).astype(np.int32)
    hi, lo = node_ids(n_hosts, seed)
    return {"node_ids_hi": hi, "node_ids_lo": lo, "host_router": host_router,
            "router_dist_us": router_dist, "lan_us": lan_us}
