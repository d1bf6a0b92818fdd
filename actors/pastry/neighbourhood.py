"""The neighbourhood set of each local node: the M nodes nearest by network delay that it
knows, nearest first (Pastry's M set; the contacts of a recovering node's rejoin).

``members`` int32[n, M], -1 empty. Beside them, per node once it has merged, the sort key
(delay << 31 | id) of each member (``kernels.merge_nearest``): a merge then looks up the
delay of the candidates only, not of the M members again -- most merges offer one
announcer that is no nearer than the farthest member. The keys are a cache of the delay
model: forgotten where members are dropped or replaced, never saved in a checkpoint.
"""

from __future__ import annotations

import numpy as np


class NeighbourhoodSet:
    def __init__(self, members: np.ndarray):
        self.members = members
        self._forget_keys()

    def _forget_keys(self) -> None:
        self._keys = None      # int64[n, M], allocated at the first merge
        self._known = None     # bool[n]: which rows' keys are valid

    @property
    def size(self) -> int:
        return self.members.shape[1]

    def key_cache(self):
        """(keys int64[n, M], known bool[n]) that ``kernels.merge_nearest`` keeps with the
        members (allocated at the first merge)."""
        if self._keys is None:
            self._keys = np.full(self.members.shape, -1, np.int64)
            self._known = np.zeros(len(self.members), bool)
        return self._keys, self._known

    def clear(self, li) -> None:
        self.members[li] = -1
        if self._known is not None:
            self._known[li] = False

    def checkpoint(self) -> dict:
        return {"members": self.members}

    def restore(self, d: dict) -> None:
        self.members = d["members"].copy()
        self._forget_keys()
