"""What Scribe's compiled handlers (``handler_kernels``, ``collapse_kernels``,
``rendezvous_kernels``) share: the status each returns, the check of the messages they
take, how one writes the group columns of a message it sends, and the message a request
starts routing."""

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


@numba.njit(cache=True)
def start_route(out, k, request, type_, key_hi, key_lo):
    """Row k of out (zeroed) becomes the message of ``type_`` that ``request``'s node
    routes toward its group's key, as ``Router.route`` makes it at its origin: src = dst =
    origin = that node, sent at the request's time, mode 1. The type's own columns are
    the caller's."""
    node = request["dst"]
    out[k]["src"] = node
    out[k]["dst"] = node
    out[k]["origin"] = node
    out[k]["time"] = request["time"]
    out[k]["sent"] = request["time"]
    out[k]["type"] = type_
    out[k]["mode"] = 1
    put_group(out, k, request["group"], key_hi, key_lo)


@numba.njit(cache=True)
def direct_rows(m, li, type_):
    """Every row a direct message (mode 0) of ``type_`` to a node of this shard (``li``:
    each row's local node, -1 for none here)."""
    for i in range(len(m)):
        if li[i] < 0 or m[i]["mode"] != 0 or m[i]["type"] != type_:
            return False
    return True
