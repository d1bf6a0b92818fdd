"""Per-hop acknowledgements of routed messages (HOP_ACK, ACK_TIMER).

The engine drops messages to dead nodes without telling the sender, so a node learns that
a routed hop was lost only by a missing acknowledgement:

- every routed hop X -> Y is acknowledged by Y (HOP_ACK, carrying the hop's identity:
  origin, key, type, hops); X keeps a copy of the hop in a per-shard pending array and an
  ACK_TIMER at ``sent + 2 * latency + slack``;
- at the deadline an unacknowledged hop means Y is presumed failed (table repair); the
  message is handed back to be routed on from X with the repaired tables, so a routed
  message still reaches the live node numerically closest to its key.

Acknowledgements are on when keep-alives are (failures are modelled), or with
``hop_ack = "on"``; a stable overlay sends none.
"""

from __future__ import annotations

import numpy as np

from . import handler_kernels, kernels
from . import types as msg_types
from .messages import MSG_DTYPE, msgs_of, take_rows

_FIRST_ROOM = 64   # pending hops the arrays hold before they first grow
_ROW = np.dtype((np.void, MSG_DTYPE.itemsize))


class HopAcks:
    def __init__(self, nodes, repair, enabled: bool, slack_us: int):
        """``nodes`` :class:`~.nodes.PastryNodes`; ``repair``
        :class:`~.table_repair.TableRepair` (presumes the silent next hops failed);
        deadline = sent + 2 * latency + ``slack_us``."""
        self.nodes = nodes
        self.repair = repair
        self.enabled = bool(enabled)
        self.slack_us = int(slack_us)
        # hops sent, awaiting HOP_ACK, in sending order: the first `_count[0]` rows of
        # arrays with room to grow (a routed hop appends a row or two; a concatenation per
        # hop would copy every pending hop each time); the count is an array the compiled
        # cell loop changes in place
        self._count = np.zeros(1, np.int64)
        self._rows = np.zeros(_FIRST_ROOM, MSG_DTYPE)
        self._deadline = np.zeros(_FIRST_ROOM, np.int64)
        self._identity = np.zeros(_FIRST_ROOM, np.uint64)   # each one's kernels.hop_key

    @property
    def _n(self) -> int:
        return int(self._count[0])

    def loop_inputs(self) -> tuple:
        """What ``handler_kernels.on_runs`` takes to handle HOP_ACK and ACK_TIMER runs as
        :meth:`on_ack` and :meth:`on_timer` do, and to acknowledge and expect the hops of
        the runs it routes as :meth:`receive` and :meth:`expect` do: (pending rows,
        deadlines, identities, the count of pending hops (int64[1]), the slack). Read at
        each call: growing replaces the arrays."""
        return self._rows, self._deadline, self._identity, self._count, self.slack_us

    @property
    def pending(self) -> np.ndarray:
        """The pending hops' records (a view: valid until the next change)."""
        return self._rows[:self._n]

    @property
    def deadline(self) -> np.ndarray:
        return self._deadline[:self._n]

    @property
    def identity(self) -> np.ndarray:
        return self._identity[:self._n]

    # ---- sending side ---------------------------------------------------------------
    def expect(self, ctx, hops) -> None:
        """Remember routed hops just sent (records as sent: src = this node, dst = the next
        hop) until acknowledged (``handler_kernels.expect_hops``), each with an ACK_TIMER
        at its deadline, set right after the hops."""
        if not self.enabled or not len(hops):
            return
        n, k = self._n, len(hops)
        self.make_room(k)
        handler_kernels.expect_hops(hops, self.slack_us, *self.loop_inputs()[:4])
        ctx.timer(hops["src"], self._deadline[n:n + k], msg_types.ACK_TIMER)

    def make_room(self, k: int) -> None:
        """Room for ``k`` more pending hops (a compiled handler that expects hops itself,
        ``handler_kernels.expect_hops``, has no room to grow)."""
        if self._n + k > len(self._rows):
            self._grow(self._n + k)

    def _grow(self, need: int) -> None:
        size = max(need, 2 * len(self._rows))
        for name in ("_rows", "_deadline", "_identity"):
            a = getattr(self, name)
            b = np.zeros(size, a.dtype)
            b[:self._n] = a[:self._n]
            setattr(self, name, b)

    def forget_senders(self, li) -> None:
        """Crashed nodes ``li`` no longer wait for their hops' acknowledgements."""
        if len(li) and len(self.pending):
            self._keep(~np.isin(self.pending["src"], self.nodes.global_ids[li]))

    # ---- receiving side -------------------------------------------------------------
    def receive(self, ctx, m):
        """Routed messages ``m`` that arrived at their ``dst``: those a node still
        (re)joining got are dropped unanswered, the others that came over a hop
        acknowledged (``handler_kernels.acknowledge_hops``). Returns the rows kept."""
        li = np.asarray(self.nodes.local(ctx, m["dst"]), np.int64)
        keep, = ctx.send_compiled(len(m), 0, handler_kernels.acknowledge_hops, m, li,
                                  self.nodes.joined)
        return m if len(keep) == len(m) else take_rows(m, keep)

    def on_ack(self, ctx, batch) -> None:
        """HOP_ACK: the sender is alive; clear the acknowledged pending hops (k acks with
        one identity clear its k earliest pending copies; ``handler_kernels.on_hop_ack``)."""
        m = msgs_of(batch)
        handler_kernels.on_hop_ack(m, np.asarray(self.nodes.local(ctx, m["dst"]), np.int64),
                                   self.nodes.failed.ids, *self.loop_inputs()[:4])

    def on_timer(self, ctx, batch):
        """ACK_TIMER: hops of these nodes past their deadline were lost. Their next hops
        are presumed failed; returns the messages to route on from the sender (as if they
        had waited there until the deadline), or None."""
        m = msgs_of(batch)
        if not len(self.pending):
            return None
        due, n_due = kernels.hops_due(self.pending, self.deadline, m)
        if not n_due:
            return None
        lost, dl = take_rows(self.pending, due), self.deadline[due]
        self._keep(~due)
        # per node in sending order (insertion order is per-node deterministic)
        o = np.lexsort((dl, lost["src"]))
        lost, dl = take_rows(lost, o), dl[o]
        ctx.count("pastry_hop_timeouts", len(lost))
        x = lost["src"].astype(np.int64)
        self.repair.presume_failed(ctx, self.nodes.local(ctx, x), lost["dst"].astype(np.int64),
                                   dl)
        again = lost.copy()
        lat = np.asarray(ctx.latency(x, lost["dst"]), np.int64)
        again["path_us"] = lost["path_us"] - lat + (dl - lost["time"])
        again["hops"] -= 1
        again["dst"] = again["src"]
        again["time"] = again["sent"] = dl
        return again

    def _keep(self, keep) -> None:
        """Keep the pending hops of mask ``keep``, in their order."""
        self._set(take_rows(self.pending, keep), self.deadline[keep], self.identity[keep])

    def _set(self, rows, deadline, identity) -> None:
        n = len(rows)
        if n > len(self._rows):
            self._grow(n)
        self._rows.view(_ROW)[:n] = take_rows(rows, slice(None)).view(_ROW)
        self._deadline[:n], self._identity[:n] = deadline, identity
        self._count[0] = n

    def checkpoint(self) -> dict:
        return {"pending": self.pending, "deadline": self.deadline, "identity": self.identity}

    def restore(self, d: dict) -> None:
        self._set(d["pending"], d["deadline"], d["identity"])
