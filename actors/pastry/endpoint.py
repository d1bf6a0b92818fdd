"""The overlay endpoint: what Pastry offers its application, exactly the ``Endpoint`` of
actors/common_api.py (route, send, replica_set) and nothing else."""

from __future__ import annotations

import numpy as np


class OverlayEndpoint:
    def __init__(self, router, nodes):
        """``router`` :class:`~.router.Router`; ``nodes`` :class:`~.nodes.PastryNodes`."""
        self._router = router
        self._nodes = nodes

    def route(self, ctx, src, key_hi, key_lo, type_code, sent, randomize=False, **fields):
        """Route one message per row from local nodes ``src`` towards (key_hi, key_lo)
        (mode 1); ``randomize``: a random known node as the first hop (see Router.route)."""
        self._router.route(ctx, src, key_hi, key_lo, type_code, sent, randomize=randomize,
                           **fields)

    def send(self, ctx, src, dst, type_code, sent, **fields):
        """Direct messages to known nodes (mode 0)."""
        fields.setdefault("mode", 0)
        ctx.send(src, dst, type_code, sent, **fields)

    def send_compiled(self, ctx, rows: int, ints: int, kernel, *args, zeroed: bool = True):
        """Direct messages (mode 0: the records come zeroed, or the kernel zeroes those it
        writes) written by an application's compiled handler in the same call as its
        work: ``ctx.send_compiled``."""
        return ctx.send_compiled(rows, ints, kernel, *args, zeroed=zeroed)

    def replica_set(self, ctx, nodes, k: int) -> np.ndarray:
        """The k nodes numerically closest to each local node, from its leaf set."""
        li = self._nodes.local(ctx, nodes)
        if len(li) and li.min() < 0:
            raise ValueError("Pastry.replica_set: nodes must be local to this shard")
        return self._nodes.leaves.replica_set(li, k)
