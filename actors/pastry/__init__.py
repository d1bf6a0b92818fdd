"""Pastry overlay (SPEC 2): 128-bit ids, compact state, oracle bootstrap, vectorized
routing, and the protocol stack (join, keep-alives, repair). See docs/pastry.md."""

from .ids import closest_node, node_ids, ring_dist, shared_prefix_len, sorted_order
from .oracle import oracle_state
from .routing import next_hop
from .state import PastryState, table_rows

__all__ = ["PastryState", "closest_node", "next_hop", "node_ids", "oracle_state", "ring_dist",
           "shared_prefix_len", "sorted_order", "table_rows"]
