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
from actors.stack_loop import StackCellLoop


class OverlayStack:
    """Composes the shard's Pastry nodes and their application: the engine's calls go to
    Pastry (which drives the application through the common API's upcalls and lifecycle
    calls), plus the queries scenarios make through ``emu.call(method, ...)`` (the engine
    passes the shard context first). ``app`` None: Pastry alone.

    ``one_by_one``: the engine hands every run of a cell to ``handle``, to the handler of
    its type (no compiled cell loop, no stretches of runs in ``handle_runs``), and the
    stack compiles its loop's application part ahead instead (:attr:`compile_ahead`).
    The same results, slower; it lets scenarios/warm.py compile the loop's parts and the
    handler kernels in a second process beside the one composing the loop."""

    def __init__(self, pastry_params: dict, app=None, one_by_one: bool = False):
        self.app = app
        self.pastry = Pastry(app, dict(pastry_params))
        self.one_by_one = bool(one_by_one)
        self._loop = None    # a compiled cell loop of the whole stack (ScribeStack's)
        self._ahead = None   # the same, one by one: only its parts compiled ahead
        # the engine calls handle once per run of a cell (or handle_runs for a stretch of
        # runs): straight to Pastry's
        self.handle = self.pastry.handle
        self.handle_runs = self.pastry.handle_runs

    # ---- engine interface -----------------------------------------------------------
    def setup(self, ctx):
        self.pastry.setup(ctx)

    def handle(self, ctx, type_code, batch):
        self.pastry.handle(ctx, type_code, batch)

    @property
    def compiled_run_types(self) -> frozenset:
        return frozenset() if self.one_by_one else self.pastry.compiled_run_types

    @property
    def run_cells(self):
        """The stack's compiled cell loop (emulator/window.py): Pastry's with its
        application's compiled runs where the stack composes them, else Pastry's; or
        None (always None one by one)."""
        if self.one_by_one:
            return None
        return self._loop or self.pastry.run_cells

    @property
    def compile_ahead(self):
        """One by one, the stack's loop's ``compile_ahead(ctx, eng)`` (the engine calls it
        once, with its arrays, before any cell); else None."""
        return self._ahead.compile_ahead if self._ahead is not None else None

    def on_fail(self, ctx, local_idx):
        self.pastry.on_fail(ctx, local_idx)

    def on_recover(self, ctx, local_idx):
        self.pastry.on_recover(ctx, local_idx)

    def checkpoint(self) -> dict:
        return self.pastry.checkpoint()

    def restore(self, state: dict):
        self.pastry.restore(state)

    def dump(self, ctx, phase):
        return self.pastry.dump(ctx, phase)

    # ---- queries --------------------------------------------------------------------
    def overlay_state(self, ctx):
        """(global node ids, Pastry state dict) of this shard, for table-quality reports."""
        return self.pastry.export_state()

    def joined(self, ctx) -> int:
        """How many of this shard's nodes Pastry counts as joined (able to route): the
        protocol bootstrap runs until all of them are."""
        return int(self.pastry.joined.sum())

    def clock(self, ctx) -> int:
        """Start of the last cell this shard processed (us). The maximum over shards is the
        time of the last event anywhere -- unlike the driver's window end, it does not
        depend on the number of shards, so scenarios schedule the next phase from it."""
        return int(ctx.now)


class ScribeStack(OverlayStack):
    """The product's stack: Pastry with Scribe as its application."""

    def __init__(self, pastry_params: dict, scribe_params: dict, one_by_one: bool = False):
        super().__init__(pastry_params, Scribe(dict(scribe_params)), one_by_one)
        self.scribe = self.app

    def setup(self, ctx):
        super().setup(ctx)
        if self.pastry.loop_part is not None and self.scribe.compiled_run_types:
            loop = StackCellLoop(self.pastry, self.scribe, ctx.message_dtype)
            if self.one_by_one:
                self._ahead = loop
            else:
                self._loop = loop


def make_stack(pastry_params: dict, scribe_params: dict, one_by_one: bool = False) -> ScribeStack:
    """A new stack: Pastry with Scribe as its application (``one_by_one``: see
    :class:`OverlayStack`)."""
    return ScribeStack(pastry_params, scribe_params, one_by_one)


def stack_factory(pastry_params: dict, scribe_params: dict, one_by_one: bool = False):
    """Picklable zero-argument factory for ``Emulator(stack_factory=...)``.

    Builds one stack here first so bad parameters fail in the caller, with the protocol's
    own message, instead of inside every shard actor.
    """
    make_stack(pastry_params, scribe_params, one_by_one)
    return functools.partial(make_stack, dict(pastry_params), dict(scribe_params), one_by_one)


def type_names() -> dict[int, str]:
    """Message type code -> name for every protocol of the stack (for logs and counters)."""
    overlap = set(PASTRY_TYPE_NAMES) & set(SCRIBE_TYPE_NAMES)
    if overlap:  # the code ranges of ARCHITECTURE.md keep them apart; guard edits
        raise ValueError(f"type codes used by both Pastry and Scribe: {sorted(overlap)}")
    return {**{int(k): v for k, v in PASTRY_TYPE_NAMES.items()},
            **{int(k): v for k, v in SCRIBE_TYPE_NAMES.items()}}
