"""The stack's message record (actors/messages.py) and the engine's Batch class."""

from __future__ import annotations

import numpy as np

from actors.messages import MSG_DTYPE  # noqa: F401 - re-exported: the stack's record
from emulator.batch import Batch

NO_PAYLOAD = np.zeros(0, np.int32)


def msgs_of(batch) -> np.ndarray:
    """The structured message array of a Batch (or of a bare structured array)."""
    return batch.msgs if hasattr(batch, "msgs") else batch


def make_batch(msgs: np.ndarray, payload: np.ndarray | None = None):
    try:
        return Batch(msgs, payload)
    except TypeError:  # pragma: no cover - engine constructor with keywords
        return Batch(msgs=msgs, payload=payload)
