"""Pastry overlay (SPEC 2): 128-bit ids, compact per-part state, oracle bootstrap, compiled
routing, and the protocol as composed parts (join, leaf-set maintenance, table repair,
hop acks; see docs/ARCHITECTURE.md "Pastry's parts" and docs/pastry.md)."""

import emulator  # noqa: F401 (first: numba's cache keyed by every kernel source)

from .ids import closest_node, node_ids, ring_dist, shared_prefix_len, sorted_order
from .oracle import oracle_state
from .routing import next_hop
from .state import PastryState, table_rows

__all__ = ["PastryState", "closest_node", "next_hop", "node_ids", "oracle_state", "ring_dist",
           "shared_prefix_len", "sorted_order", "table_rows"]
