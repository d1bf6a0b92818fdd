"""The leaf set of each local node: its l/2 numerically nearest smaller and l/2 nearest
larger known ids (FreePastry's ``LeafSet``), with the keep-alive clock of every member.

``members`` int32[n, l]: ``[:, :l/2]`` the smaller ids, nearest first; ``[:, l/2:]`` the
larger ids, nearest first (wrap-around on the ring); -1 empty. ``heard`` int64[n, l]: when
the member in that slot was last heard from; clocks move with their members.
"""

from __future__ import annotations

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
        """(len(li), k) ids: the k members nearest each node, alternating nearest smaller
        and nearest larger (sides are ordered nearest first); -1 where fewer. O(len * l)."""
        half = self.half
        leaf = self.members[li]
        out = np.full((len(li), k), -1, np.int32)
        inter = np.stack([leaf[:, :half], leaf[:, half:]], axis=2).reshape(len(li), -1)
        for row in range(len(li)):  # k and l are small; rows are the RPs of one request
            got = inter[row][inter[row] >= 0][:k]
            out[row, :len(got)] = got
        return out

    def clear(self, li) -> None:
        self.members[li] = -1
        self.heard[li] = 0

    def checkpoint(self) -> dict:
        return {"members": self.members, "heard": self.heard}

    def restore(self, d: dict) -> None:
        self.members, self.heard = d["members"].copy(), d["heard"].copy()
