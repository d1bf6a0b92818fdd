"""The protocol stack every shard runs: Pastry with Scribe on top.

Scenarios hand the engine ``functools.partial(make_stack, pastry_params, scribe_params)``:
a partial of a module-level function pickles by reference, so each shard actor builds its
own fresh stack from two plain dicts (no protocol object crosses the wire).
"""

from __future__ import annotations

import functools

from actors.pastry.protocol import Pastry
from actors.pastry.types import TYPE_NAMES as PASTRY_TYPE_NAMES
from actors.scribe import TYPE_NAMES as SCRIBE_TYPE_NAMES
from actors.scribe import Scribe


class ScribeStack(Pastry):
    """Pastry with Scribe bound as its application, plus the queries scenarios make through
    ``emu.call(method, ...)`` (the engine passes the shard context first)."""

    def overlay_state(self, ctx):
        """(global node ids, Pastry state dict) of this shard, for table-quality reports."""
        return self.export_state()

    def clock(self, ctx) -> int:
        """Start of the last cell this shard processed (us). The maximum over shards is the
        time of the last event anywhere -- unlike the driver's window end, it does not
        depend on the number of shards, so scenarios schedule the next phase from it."""
        return int(ctx.now)

    def alive_nodes(self, ctx):
        """Global ids of this shard's live nodes."""
        return self.nodes[ctx.alive].copy()


def make_stack(pastry_params: dict, scribe_params: dict) -> ScribeStack:
    """A new Pastry(Scribe) stack; Pastry binds Scribe as its application."""
    return ScribeStack(Scribe(dict(scribe_params)), dict(pastry_params))


def stack_factory(pastry_params: dict, scribe_params: dict):
    """Picklable zero-argument factory for ``Emulator(stack_factory=...)``.

    Builds one stack here first so bad parameters fail in the caller, with the protocol's
    own message, instead of inside every shard actor.
    """
    make_stack(pastry_params, scribe_params)
    return functools.partial(make_stack, dict(pastry_params), dict(scribe_params))


def type_names() -> dict[int, str]:
    """Message type code -> name for every protocol of the stack (for logs and counters)."""
    overlap = set(PASTRY_TYPE_NAMES) & set(SCRIBE_TYPE_NAMES)
    if overlap:  # the code ranges of ARCHITECTURE.md keep them apart; guard edits
        raise ValueError(f"type codes used by both Pastry and Scribe: {sorted(overlap)}")
    return {**{int(k): v for k, v in PASTRY_TYPE_NAMES.items()},
            **{int(k): v for k, v in SCRIBE_TYPE_NAMES.items()}}
