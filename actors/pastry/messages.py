"""Pastry's view of the engine's message records: the one import of the engine's batch
definitions in actors/pastry/, and the small helpers every protocol part uses on them.

A handler receives an engine ``Batch`` (rows of ``MSG_DTYPE`` plus a CSR payload of int32
ids); the parts work on the structured rows and build new rows with ``ctx.send`` /
``ctx.timer``. O(rows) each.
"""

from __future__ import annotations

import numpy as np

from actors.messages import MSG_DTYPE  # the stack's message record
from emulator.batch import Batch, take_rows

from . import kernels

__all__ = ["MSG_DTYPE", "Batch", "make_batch", "msgs_of", "payload_of",
           "send_rows", "sender_and_payload", "take_rows"]


def msgs_of(batch) -> np.ndarray:
    """The structured rows of a Batch (or a bare structured array, as tests pass)."""
    return batch.msgs if hasattr(batch, "msgs") else batch


def payload_of(batch) -> np.ndarray:
    """The flat int32 payload of a Batch (empty for a bare array or no payload)."""
    payload = getattr(batch, "payload", None)
    return np.zeros(0, np.int32) if payload is None else np.asarray(payload)


def make_batch(msgs, payload=None) -> Batch:
    return Batch(msgs, payload)


def send_rows(ctx, src, dst, type_code, sent, rows, **fields) -> None:
    """Direct messages each carrying one row of the id matrix ``rows`` as payload (-1
    entries dropped)."""
    ctx.send_rows(src, dst, type_code, sent, rows, mode=0, **fields)


def sender_and_payload(msgs, payload) -> np.ndarray:
    """Each message's payload ids as a padded int64 matrix (-1 pads) with its sender
    appended as the last column: the candidates a receiver offers its tables."""
    return kernels.sender_and_payload(msgs, np.asarray(payload, np.int32))
