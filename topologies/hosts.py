"""Attach end hosts to routers."""
from __future__ import annotations

import numpy as np

from .errors import TopologyError
from .graph import RouterGraph
from .topology import Topology

# stream tag so host placement is independent of the generator's draws for the same seed
_HOST_STREAM = 0x4057


def attach_hosts(graph: RouterGraph | Topology, n_hosts: int, seed: int = 0,
                 lan_us: int = 1000) -> Topology:
    """N hosts, each on a router drawn uniformly at random (per seed); O(N).

    Accepts a RouterGraph or a Topology (its routing tables are then reused).
    """
    n_hosts = int(n_hosts)
    if n_hosts < 0:
        raise TopologyError(f"n_hosts must be >= 0, got {n_hosts}")
    n_routers = graph.n_routers
    rng = np.random.default_rng([int(seed), _HOST_STREAM])
    host_router = rng.integers(0, n_routers, size=n_hosts).astype(np.int32)
    if isinstance(graph, Topology):
        return graph.with_hosts(host_router, lan_us=lan_us)
    return Topology(graph, host_router, lan_us=lan_us)
