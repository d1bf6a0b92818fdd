"""Network model: GT-ITM transit-stub graphs, measured maps, IP routes and baselines.

Pure numpy/scipy/networkx. See docs/topologies.md.
"""
from .errors import TopologyError
from .graph import EDGE_CLASS_NAMES, RouterGraph
from .hosts import PLACEMENTS, attach_hosts, place_hosts, scale_mean_delay
from .topology import Topology
from .transit_stub import PRESETS, GeoParams, TransitStubSpec, generate_transit_stub


def make_topology(source: str, seed: int, n_hosts: int, cache_dir=None, lan_us: int = 1000,
                  **options):
    """Build (or load from cache) a topology from a source string; see topologies.make
    (options: placement, lan_hosts_per_router, mean_core_delay_us)."""
    from .make import make_topology as _make
    return _make(source, seed, n_hosts, cache_dir=cache_dir, lan_us=lan_us, **options)


def load_topology(path):
    """Read a topology file written by Topology.save."""
    return Topology.load(path)


__all__ = [
    "EDGE_CLASS_NAMES",
    "PLACEMENTS",
    "PRESETS",
    "GeoParams",
    "RouterGraph",
    "Topology",
    "TopologyError",
    "TransitStubSpec",
    "attach_hosts",
    "generate_transit_stub",
    "load_topology",
    "make_topology",
    "place_hosts",
    "scale_mean_delay",
]
