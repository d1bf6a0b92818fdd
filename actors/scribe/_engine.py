"""Access to the engine's message dtype and Batch class (emulator/batch.py).

Until the engine lands, the dtype documented in docs/ARCHITECTURE.md is used directly so
the Scribe code and its harness tests can run; once ``emulator.batch`` exists it wins.
"""

from __future__ import annotations

import numpy as np

try:  # the engine's definitions are the contract
    from emulator.batch import MSG_DTYPE, Batch  # type: ignore
except ImportError:  # pragma: no cover - only before the engine lands
    MSG_DTYPE = np.dtype([
        ("time", "i8"), ("sent", "i8"), ("src", "i4"), ("dst", "i4"), ("seq", "i8"),
        ("type", "i2"), ("mode", "i1"), ("origin", "i4"), ("key_hi", "u8"), ("key_lo", "u8"),
        ("group", "i4"), ("hops", "i2"), ("path_us", "i8"), ("a", "i8"), ("b", "i8"),
        ("c", "i8"), ("pay_off", "i8"), ("pay_len", "i4")])

    class Batch:  # minimal stand-in with the documented attributes
        def __init__(self, msgs, payload=None):
            self.msgs = msgs
            self.payload = np.zeros(0, np.int32) if payload is None else payload

        def __len__(self):
            return len(self.msgs)


NO_PAYLOAD = np.zeros(0, np.int32)


def msgs_of(batch) -> np.ndarray:
    """The structured message array of a Batch (or of a bare structured array)."""
    return batch.msgs if hasattr(batch, "msgs") else batch


def make_batch(msgs: np.ndarray, payload: np.ndarray | None = None):
    try:
        return Batch(msgs, payload)
    except TypeError:  # pragma: no cover - engine constructor with keywords
        return Batch(msgs=msgs, payload=payload)
