"""Each local node's memory of the nodes it presumes failed: a ring buffer of the last
``memory`` ids per node. Ids in it are kept out of the node's tables until the node hears
from them directly (a node presumed failed by mistake, or recovered, is re-admitted).

``ids`` int32[n, memory] (-1 empty), ``next_slot`` int64[n]: where the next id goes.
"""

from __future__ import annotations

import numpy as np

from . import kernels


class FailedNodes:
    def __init__(self, n_local: int, memory: int):
        self.ids = np.full((n_local, memory), -1, np.int32)
        self.next_slot = np.zeros(n_local, np.int64)

    def forget(self, li, senders) -> None:
        """Nodes ``li`` heard from ``senders`` directly: they are alive."""
        if len(li):
            kernels.forget_failed(self.ids, np.ascontiguousarray(li, np.int64),
                                  np.ascontiguousarray(senders, np.int64))

    def clear(self, li) -> None:
        self.ids[li] = -1

    def checkpoint(self) -> dict:
        return {"ids": self.ids, "next_slot": self.next_slot}

    def restore(self, d: dict) -> None:
        self.ids, self.next_slot = d["ids"].copy(), d["next_slot"].copy()
