"""The neighbourhood set of each local node: the M nodes nearest by network delay that it
knows, nearest first (Pastry's M set; the contacts of a recovering node's rejoin).

``members`` int32[n, M], -1 empty.
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .merge import group_rows


class NeighbourhoodSet:
    def __init__(self, members: np.ndarray):
        self.members = members

    @property
    def size(self) -> int:
        return self.members.shape[1]

    def merge(self, li, cand, global_ids, latency_tables, failed_ids) -> None:
        """Keep the M nearest (probed) of the members and the candidate ids (rows of one
        node are combined first); ids in ``failed_ids`` stay out. O(B c log c)."""
        li, cand, _ = group_rows(li, cand)
        both = np.concatenate([self.members[li].astype(np.int64), cand], axis=1)
        hr, rdist, lan = latency_tables
        self.members[li] = kernels.select_nearest(global_ids[li], both, self.size,
                                                  failed_ids[li], hr, rdist, lan)

    def drop(self, li, dead_ids) -> None:
        """Remove ``dead_ids[i]`` from node ``li[i]``'s set (the hole stays until a merge)."""
        r, c = np.nonzero(self.members[li] == np.asarray(dead_ids)[:, None])
        self.members[li[r], c] = -1

    def clear(self, li) -> None:
        self.members[li] = -1

    def checkpoint(self) -> dict:
        return {"members": self.members.copy()}

    def restore(self, d: dict) -> None:
        self.members = d["members"].copy()
