"""The leaf set of each local node: its l/2 numerically nearest smaller and l/2 nearest
larger known ids (FreePastry's ``LeafSet``), with the keep-alive clock of every member.

``members`` int32[n, l]: ``[:, :l/2]`` the smaller ids, nearest first; ``[:, l/2:]`` the
larger ids, nearest first (wrap-around on the ring); -1 empty. ``heard`` int64[n, l]: when
the member in that slot was last heard from; clocks move with their members.
"""

from __future__ import annotations

import numpy as np

from . import kernels


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

    def drop(self, li, dead_ids) -> None:
        """Remove ``dead_ids[i]`` from the leaf set of node ``li[i]`` and close the holes
        in each side (nearest first), moving the keep-alive clocks along."""
        hit = self.members[li] == np.asarray(dead_ids)[:, None]
        r, c = np.nonzero(hit)
        self.members[li[r], c] = -1
        ul = np.unique(li)
        for side in self.sides():
            part = self.members[ul, side]
            o = np.argsort(part < 0, axis=1, kind="stable")
            self.members[ul, side] = np.take_along_axis(part, o, axis=1)
            self.heard[ul, side] = np.take_along_axis(self.heard[ul, side], o, axis=1)

    def contains(self, li, ids) -> np.ndarray:
        """Whether ``ids[i]`` is a member of node ``li[i]``'s leaf set."""
        return kernels.row_contains(self.members, np.asarray(li, np.int64),
                                    np.asarray(ids, np.int64))

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
