"""The routing table of each local node (FreePastry's ``RoutingTable``).

``entries`` int32[n, rows, 2**b]: row r, column d holds a node sharing the first r digits
with the local node whose digit r is d, chosen by proximity (the nearest by delay among
those offered); -1 empty (the node's own column stays empty).
"""

from __future__ import annotations

import numpy as np

from . import kernels


class RoutingTable:
    def __init__(self, entries: np.ndarray, b: int):
        self.entries = entries
        self.b = int(b)

    @property
    def rows(self) -> int:
        return self.entries.shape[1]

    @property
    def width(self) -> int:
        return 1 << self.b

    def flat(self, li) -> np.ndarray:
        """The tables of nodes ``li`` as rows of rows * 2^b entries (a copy)."""
        return self.entries[li].reshape(len(li), -1)

    def insert(self, li, global_ids, cand, ids_hi, ids_lo, latency_tables, failed_ids) -> int:
        """Offer candidate ids (a padded matrix, one row per entry of ``li``) to the tables
        of local nodes ``li``: a slot takes a candidate when empty or when the candidate is
        nearer by delay (probed); ids in ``failed_ids`` stay out. Returns the probe count."""
        li = np.ascontiguousarray(li, np.int64)
        cand = np.ascontiguousarray(cand, np.int64)
        hr, rdist, lan = latency_tables
        return kernels.insert_table(self.entries, li, global_ids, cand, ids_hi, ids_lo,
                                    self.b, hr, rdist, lan, failed_ids)

    def rows_for(self, li, my_ids, their_ids, ids_hi, ids_lo) -> np.ndarray:
        """Rows 0..min(spl(me, them), rows - 1) of each node's table as a matrix of
        rows * 2^b entries of its dtype (later rows -1): what a join route node sends the
        joiner."""
        return kernels.table_rows(self.entries, np.ascontiguousarray(li, np.int64),
                                  np.ascontiguousarray(my_ids, np.int64),
                                  np.ascontiguousarray(their_ids, np.int64), ids_hi, ids_lo,
                                  self.b)

    def clear(self, li) -> None:
        self.entries[li] = -1

    def checkpoint(self) -> dict:
        return {"entries": self.entries, "b": self.b}

    def restore(self, d: dict) -> None:
        self.entries, self.b = d["entries"].copy(), int(d["b"])
