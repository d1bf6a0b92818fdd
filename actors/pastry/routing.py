"""Pastry next-hop selection (SPEC 2) for a batch of (local node, key), compiled.

Pure function of the state arrays and the global id columns. For each row:

1. leaf-set rule: if the key lies in the ring range [farthest smaller leaf, farthest
   larger leaf] (a short or empty side covers only up to its farthest member), the next
   hop is the numerically closest of leaf set ∪ self (self: deliver here);
2. prefix rule: row = shared prefix length p of self and key, column = digit p of the key;
   take that table entry if it is set;
3. rare case: any known node (leaf set, table, neighbourhood) sharing at least p digits
   with the key and numerically closer to it than self (the closest such one); none:
   deliver here.

Each step goes to a node that shares a longer prefix with the key, or as long a prefix
and is numerically closer, so a route cannot loop.
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .ids import U64
from .state import PastryState

DELIVER = -1


def next_hop(state: PastryState, local_idx, self_ids, key_hi, key_lo, ids_hi, ids_lo,
             exclude=None):
    """Next global node for each (local node, key), or -1 to deliver at the local node,
    and the rule used (int8: 0 leaf set, 1 prefix, 2 rare case), by the compiled kernel
    (``kernels.next_hop``).

    ``local_idx`` indexes the state arrays, ``self_ids`` are the same nodes' global ids,
    ``ids_hi/ids_lo`` the id columns of all N nodes; ``exclude`` (int64[B], -1 for none):
    a node each row must route as if it were absent (a node's lookup of its own id must
    reach its neighbours, not itself). O(B * l) on the common paths, O(B * (l + rows *
    2^b + M)) in the rare case."""
    local_idx = np.ascontiguousarray(local_idx, np.int64)
    nb = len(local_idx)
    if nb == 0:
        return np.full(0, DELIVER, np.int64), np.zeros(0, np.int8)
    ex = np.full(nb, -1, np.int64) if exclude is None else _column(exclude, np.int64, nb)
    return kernels.next_hop(state.rt, state.leaf, state.nbr, local_idx,
                            _column(self_ids, np.int64, nb), _column(key_hi, U64, nb),
                            _column(key_lo, U64, nb), np.asarray(ids_hi, U64),
                            np.asarray(ids_lo, U64), int(state.b), ex)


def _column(values, dtype, n):
    """``values`` as a contiguous 1-d array of n entries (scalars are repeated)."""
    a = np.asarray(values, dtype)
    if a.shape != (n,):
        a = np.broadcast_to(a, (n,))
    return np.ascontiguousarray(a)
