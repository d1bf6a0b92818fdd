"""Pastry's three tables as one value: routing tables, leaf sets, neighbourhood sets.

A running Pastry keeps them in its parts (``RoutingTable.entries``, ``LeafSet.members``,
``NeighbourhoodSet.members``; see nodes.py); this value carries them between the oracle
bootstrap, the next-hop function, ``export_state`` and the table-quality report.

All entries are global node ids (int32), -1 for an empty slot. For n local nodes:

- ``rt``   int32[n, rows, 2**b]: row r, column d holds a node sharing the first r digits
  with the local node and whose digit r is d (the node's own column stays empty);
- ``leaf`` int32[n, l]: ``leaf[:, :l/2]`` the smaller ids, nearest first; ``leaf[:, l/2:]``
  the larger ids, nearest first (wrap-around on the ring);
- ``nbr``  int32[n, M]: the M nodes closest by network delay, nearest first.

At b = 4, l = 16, M = 32 and 100k nodes (7 rows) this is 100k * (7*16 + 16 + 32) * 4 B
= 64 MB, far below the 2 GB target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from actors.params import Param, checked

from .ids import DIGIT_BITS, check_b, n_digits

# Pastry's table sizes (the protocol's other parameters: protocol.PARAMETERS)
SIZES = {
    "b": DIGIT_BITS,
    "l": Param(int, 16, "leaf-set size: the l/2 nearest smaller and l/2 nearest larger ids",
               low=2, even=True),
    "m": Param(int, 32, "neighbourhood-set size: the nodes nearest by network delay", low=0),
}


def table_rows(n_nodes: int, b: int = 4) -> int:
    """Rows of the routing table: min(128/b, ceil(log_{2^b} N) + 2). Exact integer maths."""
    b = check_b(b)
    if n_nodes < 1:
        raise ValueError(f"table_rows: need at least one node, got {n_nodes}")
    base = 1 << b
    need, span = 0, 1
    while span < n_nodes:  # ceil(log_base N) without floats
        span *= base
        need += 1
    return min(n_digits(b), need + 2)


def check_params(b: int, l: int, m: int) -> None:
    """Validate the Pastry sizes against :data:`SIZES` (one-line ValueError naming the bad
    one)."""
    checked("Pastry", SIZES, {"b": b, "l": l, "m": m})


@dataclass
class PastryState:
    """The arrays of one shard's nodes (see the module docstring for the layout)."""

    rt: np.ndarray
    leaf: np.ndarray
    nbr: np.ndarray
    b: int

    @classmethod
    def empty(cls, n_local: int, n_nodes: int, b: int = 4, l: int = 16, m: int = 32):
        check_params(b, l, m)
        rows = table_rows(n_nodes, b)
        return cls(rt=np.full((n_local, rows, 1 << b), -1, np.int32),
                   leaf=np.full((n_local, l), -1, np.int32),
                   nbr=np.full((n_local, m), -1, np.int32), b=b)

    @property
    def n_local(self) -> int:
        return self.rt.shape[0]

    @property
    def rows(self) -> int:
        return self.rt.shape[1]

    @property
    def l(self) -> int:  # noqa: E743 -- Pastry's own name for the leaf-set size
        return self.leaf.shape[1]

    @property
    def half(self) -> int:
        return self.leaf.shape[1] // 2

    def nbytes(self) -> int:
        return self.rt.nbytes + self.leaf.nbytes + self.nbr.nbytes

    def known(self, local_idx) -> np.ndarray:
        """All node ids a node knows (leaf set, table, neighbourhood): int32[len, l+rows*2^b+M]."""
        li = np.asarray(local_idx, np.int64)
        return np.concatenate([self.leaf[li], self.rt[li].reshape(len(li), -1), self.nbr[li]],
                              axis=1)

    def to_dict(self) -> dict:
        return {"rt": self.rt.copy(), "leaf": self.leaf.copy(), "nbr": self.nbr.copy(),
                "b": self.b}

    @classmethod
    def from_dict(cls, d: dict):
        return cls(rt=d["rt"].copy(), leaf=d["leaf"].copy(), nbr=d["nbr"].copy(), b=int(d["b"]))
