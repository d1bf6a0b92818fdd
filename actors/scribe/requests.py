"""Build the application requests a scenario injects (``emu.inject``) as self-messages.

Each request is a message with src = dst = origin = the node, due at the given virtual
time; Scribe handles it at that node. A request is not sent through the overlay, so it
sets none of the overlay's own fields: the overlay treats a record that its ``route`` did
not mark as a direct message and hands it to ``Application.receive`` (the zeroed record
is the overlay's "direct"). All builders are vectorized, O(n) for n requests, and
validate their input.
"""

from __future__ import annotations

import numpy as np

from .types import COLLAPSE_REQ, CREATE_REQ, JOIN_REQ, LEAVE_REQ, MCAST_REQ, McastReq, Request
from .wire import Batch, new_messages


def _self_messages(kind, type_code, nodes, times, groups=None, credentials=None, seqno=None):
    nodes = np.atleast_1d(np.asarray(nodes, dtype=np.int64))
    n = nodes.shape[0]
    def col(x, what, dtype):
        arr = np.asarray(x, dtype=dtype)
        if arr.ndim == 0:
            arr = np.full(n, arr, dtype=dtype)
        if arr.shape != (n,):
            raise ValueError(f"{kind}: {what} must be a scalar or have {n} entries")
        return arr
    times = col(times, "times", np.int64)
    if n and nodes.min() < 0:
        raise ValueError(f"{kind}: node indices must be >= 0")
    if n and times.min() < 0:
        raise ValueError(f"{kind}: times must be >= 0 (virtual microseconds)")
    msgs = new_messages(n, time=times, sent=times, src=nodes, dst=nodes, origin=nodes,
                        type=type_code, group=-1)
    if groups is not None:
        groups = col(groups, "groups", np.int64)
        if n and groups.min() < 0:
            raise ValueError(f"{kind}: group indices must be >= 0")
        msgs["group"] = groups
    if credentials is not None:
        msgs[Request.credential] = col(credentials, "credentials", np.int64)
    if seqno is not None:
        msgs[McastReq.seqno] = col(seqno, "seqno", np.int64)
    # a per-node sequence number keeps (time, src, seq) a strict order for equal times
    order = np.lexsort((np.arange(n), times, nodes))
    seq = np.empty(n, dtype=np.int64)
    sorted_nodes = nodes[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_nodes)) + 1] if n else np.zeros(0, int)
    run_start = np.repeat(starts, np.diff(np.r_[starts, n])) if n else starts
    seq[order] = np.arange(n) - run_start
    msgs["seq"] = seq
    return Batch(msgs)


def create_requests(creators, groups, times, credentials):
    """CREATE(credentials, groupId) issued by each creator node at each time."""
    return _self_messages("create_requests", CREATE_REQ, creators, times, groups, credentials)


def join_requests(members, groups, times, credentials):
    """JOIN(credentials, groupId) issued by each member node at each time."""
    return _self_messages("join_requests", JOIN_REQ, members, times, groups, credentials)


def leave_requests(members, groups, times, credentials):
    """LEAVE(credentials, groupId) issued by each member node at each time."""
    return _self_messages("leave_requests", LEAVE_REQ, members, times, groups, credentials)


def multicast_requests(sources, groups, times, credentials, seqno=None):
    """MULTICAST(credentials, groupId, msg) from each source. ``seqno`` labels the message
    (default: 0); with the reliable layer the RP numbers messages itself."""
    seq = 0 if seqno is None else seqno
    return _self_messages("multicast_requests", MCAST_REQ, sources, times, groups,
                          credentials, seqno=seq)


def collapse_requests(nodes, times):
    """Ask nodes to collapse the trees they are the root of (non-member single-child
    forwarders are removed, their child linked to their parent)."""
    return _self_messages("collapse_requests", COLLAPSE_REQ, nodes, times)
