"""Attach end hosts to routers, and scale a core's link delays to a target mean.

Two host placements (`PLACEMENTS`):

- ``uniform`` (the default): each host on a router drawn uniformly at random, with
  replacement (JSAC 2002: "each end system attached to a randomly selected router").
- ``lan_slots``: every router has a star LAN of ``lan_hosts_per_router`` slots; the hosts
  are a uniform sample, without replacement, of all n_routers x slots LAN nodes (NGC 2001,
  section 4.1: ~100 LAN nodes per core node, the Scribe nodes a random subset of them).
  No router gets more than ``lan_hosts_per_router`` hosts; with exactly n_routers x slots
  hosts every router gets exactly that many.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .errors import TopologyError
from .graph import RouterGraph
from .topology import Topology

# stream tag so host placement is independent of the generator's draws for the same seed
_HOST_STREAM = 0x4057
PLACEMENTS = ("uniform", "lan_slots")


def place_hosts(n_routers: int, n_hosts: int, seed: int = 0, placement: str = "uniform",
                lan_hosts_per_router: int = 100) -> np.ndarray:
    """host -> router (int32) for `n_hosts` hosts on `n_routers` routers; O(N) (lan_slots:
    O(number of slots) for the sample)."""
    n_hosts = int(n_hosts)
    if n_hosts < 0:
        raise TopologyError(f"n_hosts must be >= 0, got {n_hosts}")
    rng = np.random.default_rng([int(seed), _HOST_STREAM])
    if placement == "uniform":
        return rng.integers(0, n_routers, size=n_hosts).astype(np.int32)
    if placement != "lan_slots":
        raise TopologyError(f"host placement {placement!r} is unknown; use "
                            f"{' | '.join(PLACEMENTS)}")
    per = int(lan_hosts_per_router)
    if per < 1:
        raise TopologyError(f"lan_hosts_per_router must be >= 1, got {per}")
    slots = int(n_routers) * per
    if n_hosts > slots:
        raise TopologyError(f"{n_hosts} hosts do not fit in {n_routers} routers x {per} LAN "
                            f"slots = {slots}; raise lan_hosts_per_router or use fewer nodes")
    pick = rng.choice(slots, size=n_hosts, replace=False)
    return (pick // per).astype(np.int32)


def attach_hosts(graph: RouterGraph | Topology, n_hosts: int, seed: int = 0,
                 lan_us: int = 1000, placement: str = "uniform",
                 lan_hosts_per_router: int = 100) -> Topology:
    """N hosts placed on the routers per `placement` (see the module docstring), per seed.

    Accepts a RouterGraph or a Topology (its routing tables are then reused).
    """
    host_router = place_hosts(graph.n_routers, n_hosts, seed, placement, lan_hosts_per_router)
    if isinstance(graph, Topology):
        return graph.with_hosts(host_router, lan_us=lan_us)
    return Topology(graph, host_router, lan_us=lan_us)


def scale_mean_delay(graph: RouterGraph, mean_us: float) -> RouterGraph:
    """A copy of `graph` whose core-link delays are multiplied by one factor so that their
    mean is `mean_us` (each delay rounded to whole us, at least 1 us). Policy weights and
    structure are unchanged; routes are computed afterwards on the scaled delays."""
    if not mean_us > 0:
        raise TopologyError(f"mean core-link delay target must be > 0 us, got {mean_us}")
    d = graph.edge_delay_us.astype(np.float64)
    if not len(d):
        raise TopologyError(f"{graph.name}: no core links to scale")
    scaled = np.maximum(1, np.rint(d * (float(mean_us) / d.mean()))).astype(np.int64)
    meta = {**graph.meta, "mean_core_delay_target_us": float(mean_us),
            "delay_scale": float(mean_us) / float(d.mean())}
    return replace(graph, edge_delay_us=scaled, meta=meta)
