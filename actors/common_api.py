"""Pastry's common API: the only thing an overlay application (Scribe) sees of the overlay.

Castro et al., "Towards a common API for structured peer-to-peer overlays" (IPTPS 2003)
and FreePastry's ``rice.p2p.commonapi`` split the overlay from its applications with two
narrow interfaces; these are ours, vectorized (every call carries a whole sub-batch of one
shard's nodes). An application module imports from here and from ``emulator`` only, never
from ``actors.pastry``.

Complexity: every call is O(len(batch)) work of the overlay, plus O(k) per node for
``replica_set``.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

import numpy as np


def key_of(text: str) -> tuple[int, int]:
    """(hi, lo) of a 128-bit overlay key: the first 16 bytes of SHA-1(text), big-endian.

    Node ids and group ids share this id space (SPEC 2, 3)."""
    d = hashlib.sha1(text.encode()).digest()
    return int.from_bytes(d[:8], "big"), int.from_bytes(d[8:16], "big")


class Endpoint(Protocol):
    """What the overlay offers an application (downcalls)."""

    def route(self, ctx, src, key_hi, key_lo, type_code, sent, **fields) -> None:
        """Route one message per row from node ``src`` towards key (key_hi, key_lo); it is
        delivered (``Application.deliver``) at the live node numerically closest to the key,
        and ``Application.forward`` runs at every node on the way."""

    def send(self, ctx, src, dst, type_code, sent, **fields) -> None:
        """Send one message per row directly from ``src`` to the known node ``dst``
        (``Application.receive`` runs there)."""

    def send_compiled(self, ctx, rows: int, ints: int, kernel, *args,
                      zeroed: bool = True) -> tuple:
        """Direct messages written by an application's compiled handler in the same call
        as its work (``ShardContext.send_compiled``: ``rows`` zeroed records -- not
        zeroed with ``zeroed`` False: the kernel zeroes those it writes -- and room for
        ``ints`` payload ids lent to ``kernel``, which fills them in sending order);
        returns the kernel's results."""

    def replica_set(self, ctx, nodes, k: int) -> np.ndarray:
        """(len(nodes), k) global ids: the k nodes numerically closest to each node's id
        that it knows (its leaf set), -1 where it knows fewer."""


class Application(Protocol):
    """What the overlay calls on its application (upcalls and lifecycle)."""

    def bind(self, endpoint: Endpoint) -> None: ...
    def setup(self, ctx) -> None: ...
    def receive(self, ctx, batch) -> None: ...
    def receive_compiled(self, ctx, type_code: int, batch) -> bool:
        """Optional: direct messages of one type that the application may take whole in
        one compiled pass; False (nothing done) sends them the usual way (``receive``)."""
    compiled_run_types: frozenset
    """Optional, with ``receive_runs``: the types whose runs it takes in one call."""
    def receive_runs(self, ctx, m, payload, local, bounds, first, last) -> int:
        """Optional: runs ``first..last-1`` of a cell pass (records ``m`` in dispatch order,
        ``local`` each row's local index, run r = rows ``bounds[r]`` to ``bounds[r + 1]``),
        all direct messages of ``compiled_run_types`` to live nodes, in one call, as
        ``receive_compiled`` would take them one by one. Returns the first run not taken
        (``first``: none); the overlay gives that one to ``receive_compiled`` alone."""
    def deliver(self, ctx, batch) -> None: ...
    def forward(self, ctx, batch, next_hop) -> tuple:
        """(batch, next_hop), possibly changed; next_hop -1 stops a message here."""
    def routed(self, ctx, m, here, next_hop) -> bool:
        """Optional: one routing step's messages of the application, at once (records
        ``m``, the overlay's own copy, without payload; rows of mask ``here`` are delivered
        at their node, the others pass it towards ``next_hop``): what ``deliver`` of the
        ``here`` rows and then ``forward`` of the others would do, their sends in that
        order, changing ``m``'s rows and ``next_hop`` in place as ``forward`` may. False
        (nothing done): the overlay makes those two upcalls."""
    def new_leafs(self, ctx, local_idx) -> None:
        """The leaf sets of local nodes ``local_idx`` changed (the common API's update).
        It carries no time and must send nothing: the overlay may make it after the
        other handlers of the same pass, once for the nodes of several of them
        (``Pastry.handle_runs``)."""
    def on_fail(self, ctx, local_idx) -> None: ...
    def on_recover(self, ctx, local_idx) -> None: ...
    def checkpoint(self) -> dict:
        """The application's state, sharing its live arrays: the engine serialises it at
        once (``restore`` takes copies)."""
    def restore(self, state: dict) -> None: ...
    def dump(self, ctx, phase): ...
