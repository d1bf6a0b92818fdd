"""What Scribe's compiled handlers (``handler_kernels``, ``collapse_kernels``) share: the
status each returns, and how one writes the group columns of a message it sends."""

from __future__ import annotations

import numba

# a kernel's status: it declined the batch (nothing written: the handler's general path
# takes it), it did the work, or it was lent too few rows (nothing written; it says how
# many it needs)
DECLINED, DONE, MORE_ROOM = 0, 1, 2


@numba.njit(cache=True)
def put_group(out, k, g, key_hi, key_lo):
    """Row k of out (a send being written) carries group g and its key."""
    out[k]["group"] = g
    out[k]["key_hi"] = key_hi[g]
    out[k]["key_lo"] = key_lo[g]
