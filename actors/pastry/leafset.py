"""The leaf set of each local node: its l/2 numerically nearest smaller and l/2 nearest
larger known ids (FreePastry's ``LeafSet``), with the keep-alive clock of every member.

``members`` int32[n, l]: ``[:, :l/2]`` the smaller ids, nearest first; ``[:, l/2:]`` the
larger ids, nearest first (wrap-around on the ring); -1 empty. ``heard`` int64[n, l]: when
the member in that slot was last heard from; clocks move with their members.
"""

from __future__ import annotations

import numba
import numpy as np


class LeafSet:
    def __init__(self, members: np.ndarray):
        self.members = members
        self.heard = np.zeros(members.shape, np.int64)

    @property
    def half(self) -> int:
        return self.members.shape[1] // 2

    @property
    def size(self) -> int:
        return self.members.shape[1]

    def sides(self):
        """The column slices of the smaller and the larger side."""
        return slice(0, self.half), slice(self.half, self.size)

    def replica_set(self, li, k: int) -> np.ndarray:
        """(len(li), k) ids: the k members nearest each node (:func:`replica_sets`)."""
        return replica_sets(self.members, np.ascontiguousarray(li, np.int64), np.int64(k))

    def clear(self, li) -> None:
        self.members[li] = -1
        self.heard[li] = 0

    def checkpoint(self) -> dict:
        return {"members": self.members, "heard": self.heard}

    def restore(self, d: dict) -> None:
        self.members, self.heard = d["members"].copy(), d["heard"].copy()


@numba.njit(cache=True)
def replica_sets(members, li, k):
    """(len(li), k) ids: the k leaf-set members nearest each node ``li`` of ``members``
    (``LeafSet.members``), alternating nearest smaller and nearest larger (sides are
    ordered nearest first, empty places skipped); -1 where fewer. O(len(li) * l)."""
    half = members.shape[1] // 2
    out = np.full((len(li), k), -1, np.int32)
    for r in range(len(li)):
        row = members[li[r]]
        c = 0
        for j in range(half):
            if c < k and row[j] >= 0:
                out[r, c] = row[j]
                c += 1
            if c < k and row[half + j] >= 0:
                out[r, c] = row[half + j]
                c += 1
    return out
