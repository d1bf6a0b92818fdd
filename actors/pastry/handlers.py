"""Every message type of Pastry's own, declared once (:data:`HANDLERS`): the part that
takes it and its method, whether this configuration sends it at all, and the room a
message of it may need in the compiled pass of a cell's runs (send rows, payload ids).
``Pastry`` builds its dispatch tables, the types its compiled runs take and their room
from this table (:func:`tables`); the kernels' own dispatch is ``handler_kernels.on_runs``.

Adding a type is a line here, its handler, its kernel and its branch in ``on_runs``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .types import (
    ACK_TIMER,
    ANNOUNCE,
    HOP_ACK,
    JOIN,
    JOIN_LEAFS,
    JOIN_NBRS,
    JOIN_REQ,
    JOIN_ROWS,
    JOIN_START,
    KA_TIMER,
    KEEPALIVE,
    LEAF_LOOKUP,
    LEAF_REFRESH,
    LEAF_REPLY,
    LEAF_REQ,
    ROW_REPLY,
    ROW_REQ,
    ROWS_REPLY,
    ROWS_REQ,
)

# What a type needs of the configuration to be sent at all (``Pastry._compose``):
# keep-alives on; hop acknowledgements on; either (the row requests of a lazy repair,
# which a presumed failure starts).
KEEPALIVES, ACKS, REPAIRS = "keepalives", "acks", "repairs"


@dataclass(frozen=True)
class Sizes:
    """What the room of a message depends on: leaf sets of ``l``, routing tables of
    ``rows`` rows of ``width`` entries, neighbourhood sets of ``nbrs``, and the send rows a
    node that has just joined may write (``handler_kernels.joined_room``)."""

    l: int  # noqa: E741 (Pastry's own name)
    rows: int
    width: int
    nbrs: int
    joined_rows: int


@dataclass(frozen=True)
class Handler:
    """How Pastry handles one of its types.

    ``part``: the attribute of ``Pastry`` holding the part that takes it ("protocol":
    Pastry itself). ``receive``: its method for a batch sent directly (timers included);
    ``routed``: its method taking a routed batch whole where it can (False: the router
    takes it). ``when``: the conditions under which the configuration sends the type (its
    runs are compiled only then). ``room``: (send rows, payload ids) per message in the
    compiled pass, from :class:`Sizes`. ``hop``: each message sends a routed hop (with
    hop acknowledgements its ACK_TIMER too, and one arriving over a hop a HOP_ACK)."""

    type: int
    part: str
    receive: str | None = None
    routed: str | None = None
    when: tuple = ()
    room: Callable[[Sizes], tuple] = lambda s: (0, 0)
    hop: bool = False


HANDLERS = (
    Handler(JOIN_START, "join", receive="on_join_start", room=lambda s: (1, 0)),
    Handler(JOIN_REQ, "join", receive="on_join_req",
            room=lambda s: (4, s.nbrs + s.rows * s.width + s.l), hop=True),
    Handler(JOIN, "join", routed="receive_joins", room=lambda s: (3, s.rows * s.width + s.l),
            hop=True),
    Handler(JOIN_ROWS, "join", receive="on_join_rows", room=lambda s: (s.joined_rows, 0)),
    Handler(JOIN_LEAFS, "join", receive="on_join_leafs", room=lambda s: (s.joined_rows, 0)),
    Handler(JOIN_NBRS, "join", receive="on_join_nbrs", room=lambda s: (s.joined_rows, 0)),
    Handler(ROWS_REQ, "join", receive="on_rows_req", room=lambda s: (1, s.width)),
    Handler(ROWS_REPLY, "join", receive="on_rows_reply"),
    Handler(ANNOUNCE, "maintenance", receive="on_announce", room=lambda s: (2, s.l + 1)),
    Handler(KEEPALIVE, "maintenance", receive="on_keepalive", when=(KEEPALIVES,),
            room=lambda s: (1, 0)),
    Handler(KA_TIMER, "maintenance", receive="on_ka_timer", when=(KEEPALIVES,),
            room=lambda s: (2 * s.l + 3, 0)),
    Handler(LEAF_REQ, "maintenance", receive="on_leaf_req", room=lambda s: (1, s.l + 1)),
    Handler(LEAF_REPLY, "maintenance", receive="on_leaf_reply", room=lambda s: (s.l, 0)),
    # a lookup and its next timer, or a table tick: a ROWS_REQ per row, its next
    Handler(LEAF_REFRESH, "maintenance", receive="on_leaf_refresh",
            room=lambda s: (max(2, s.rows + 1), 0), hop=True),
    Handler(LEAF_LOOKUP, "maintenance", routed="receive_lookups", room=lambda s: (1, s.l + 1),
            hop=True),
    Handler(ROW_REQ, "repair", receive="on_row_req", when=(REPAIRS,), room=lambda s: (1, 0)),
    Handler(ROW_REPLY, "repair", receive="on_row_reply", when=(REPAIRS,),
            room=lambda s: (1, 0)),
    Handler(HOP_ACK, "acks", receive="on_ack", when=(ACKS,)),
    Handler(ACK_TIMER, "protocol", receive="_on_ack_timer", when=(ACKS,)),
)


@dataclass
class Tables:
    """What :func:`tables` builds for one configured Pastry."""

    receive: dict      # type -> method, batches sent directly
    routed: dict       # type -> method taking a routed batch whole where it can
    run_types: frozenset   # the types whose runs the compiled pass takes
    room: dict         # type -> (send rows, payload ids) per message of those runs


def tables(parts: dict, conditions: dict, sizes: Sizes) -> Tables:
    """The dispatch tables of a Pastry whose parts are ``parts`` (name -> part) and whose
    configuration meets ``conditions`` (condition -> bool), with the room of
    :class:`Sizes` ``sizes`` (hops' timers and acknowledgements added where ``ACKS``
    holds), from :data:`HANDLERS`. O(types)."""
    t = Tables({}, {}, frozenset(), {})
    run_types = set()
    for h in HANDLERS:
        part = parts[h.part]
        if h.receive:
            t.receive[h.type] = getattr(part, h.receive)
        if h.routed:
            t.routed[h.type] = getattr(part, h.routed)
        per_row, per_id = h.room(sizes)
        if h.hop and conditions[ACKS]:
            per_row += 1 + (h.routed is not None)
        t.room[h.type] = (per_row, per_id)
        if all(conditions[c] for c in h.when):
            run_types.add(h.type)
    t.run_types = frozenset(run_types)
    return t
