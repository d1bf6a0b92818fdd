"""How Scribe's parts talk to the network: the engine's message record and the overlay.

This is the one module of the package that imports the engine's definitions
(``emulator.batch``); the other modules take them from here (``handler_kernels`` also
calls the engine's compiled ``put_send``, which writes a send's arrival time).
``Messenger`` wraps the overlay endpoint (``actors.common_api.Endpoint``): every Scribe
message carries its group index and the group's key, so the parts pass a group and never
a key.
"""

from __future__ import annotations

import functools

import numpy as np

from actors.messages import MSG_DTYPE  # the stack's message record
from emulator import batch as engine_batch
from emulator.batch import NO_PAYLOAD, Batch, pack_rows, payload_rows, take_rows

from .handler_kernels import MORE_ROOM
from .types import TYPE_NAMES

# message records of the stack's record (the engine's default has the engine's fields only)
new_messages = functools.partial(engine_batch.new_messages, dtype=MSG_DTYPE)

__all__ = ["MSG_DTYPE", "NO_PAYLOAD", "Batch", "Messenger", "Room", "ScribeError", "msgs_of",
           "new_messages", "pack_rows", "payload_rows", "take_rows"]


# the room send_compiled lends is at most this many times what the caller offers (the
# rows it lends are zeroed, so a loose bound costs a memset)
_MAX_ROOM_FACTOR = 16.0


class Room:
    """How many records to lend a compiled kernel: per key (a kernel, a message type), a
    factor over the caller's count, raised to what the kernel asked for when it lacked
    room and never lowered, so that a kernel seldom runs short twice. ``cap`` bounds the
    factor; ``start``: first factors by key (1 for the others)."""

    __slots__ = ("cap", "factor")

    def __init__(self, cap: float, start: dict | None = None):
        self.cap = float(cap)
        self.factor = dict(start or {})

    def rows(self, key, count: int) -> int:
        """Records to lend for ``count`` units (messages, rows offered) of ``key``."""
        return int(self.factor.get(key, 1.0) * count)

    def asked(self, key, need: int, count: int) -> None:
        """The kernel of ``key`` needed ``need`` records for ``count`` units."""
        if count:
            self.factor[key] = min(self.cap, max(self.factor.get(key, 1.0), need / count))


class ScribeError(RuntimeError):
    """Scribe was used outside its contract (e.g. not bound to an overlay)."""


def msgs_of(batch) -> np.ndarray:
    """The structured message array of a Batch (or of a bare structured array)."""
    return batch.msgs if hasattr(batch, "msgs") else batch


class Messenger:
    """Sends and routes Scribe messages through the overlay endpoint, and maps the global
    node ids of incoming messages to this shard's local indices.

    ``payload`` is the payload of the batch being handled (root paths ride in it); the
    application sets it before it dispatches a batch of direct messages."""

    def __init__(self, endpoint, groups):
        self.endpoint = endpoint
        self.groups = groups
        self.payload = NO_PAYLOAD
        # per kernel, the most records it asked for over those it was offered: the room
        # lent next time (a kernel that asks for more returns before it writes anything,
        # and then runs again whole)
        self._room = Room(_MAX_ROOM_FACTOR)

    def local(self, ctx, nodes) -> np.ndarray:
        li = np.asarray(ctx.local(nodes), dtype=np.int64)
        if len(li) and li.min() < 0:
            raise ScribeError("Scribe: a message for a node of another shard reached this shard")
        return li

    def send(self, ctx, src, dst, type_code, sent, group, **fields) -> None:
        """One direct message per row from ``src`` to the known node ``dst``."""
        src, dst = np.asarray(src), np.asarray(dst)
        if src.size == 0:
            return
        if dst.min() < 0:  # a bug upstream, never a network event: fail loudly
            raise ScribeError(f"Scribe: {TYPE_NAMES[type_code]} addressed to node -1")
        hi, lo = self.groups.key(group)
        self.endpoint.send(ctx, src, dst, type_code, sent, group=group, key_hi=hi, key_lo=lo,
                           **fields)

    def send_compiled(self, ctx, rows: int, kernel, *args) -> tuple:
        """Run a compiled handler pass (``handler_kernels``) that writes its direct
        messages itself, through the endpoint, lending it ``rows`` records first and the
        exact count it asks for if those were too few. Returns the kernel's status and its
        results (``handler_kernels``: the ``need`` count and the sends' bookkeeping taken
        off). The room lent grows with what the kernel asked for before (a tick's sends
        per timer depend on the trees its node is in), so that a kernel seldom runs twice."""
        res = self.endpoint.send_compiled(ctx, self._room.rows(kernel, rows), 0, kernel, *args)
        if res[0] == MORE_ROOM:
            need = int(res[1])
            self._room.asked(kernel, need, rows)
            res = self.endpoint.send_compiled(ctx, need, 0, kernel, *args)
        return (res[0], *res[2:])

    def run_compiled(self, ctx, rows: int, kernel, *args) -> tuple:
        """As :meth:`send_compiled`, once, on rows that are not zeroed: a kernel that
        zeroes the rows it writes, and stops where it lacks room (saying how much it
        needed) rather than asking again. A loose ``rows`` then costs no zeroing."""
        return self.endpoint.send_compiled(ctx, rows, 0, kernel, *args, zeroed=False)

    def route(self, ctx, src, type_code, sent, group, **fields) -> None:
        """One message per row from ``src``, routed to the group's RP (the node whose id is
        numerically closest to the group's key)."""
        if len(np.atleast_1d(src)) == 0:
            return
        hi, lo = self.groups.key(group)
        self.endpoint.route(ctx, src, hi, lo, type_code, sent, group=group, **fields)

    def replica_set(self, ctx, nodes, k: int) -> np.ndarray:
        """(len(nodes), k) global ids of the k nodes closest to each node, -1 padded."""
        return self.endpoint.replica_set(ctx, nodes, k)
