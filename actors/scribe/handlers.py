"""Every message type Scribe handles, declared once (:data:`HANDLERS`): the part that takes
it and its methods, the compiled pass that takes a whole cell of it where the configuration
is the one its kernel covers, how the stack's compiled loop takes a run of it, and the
records such a run may send per message. ``Scribe`` builds its dispatch tables, the types
its compiled loop takes and the room it lends from this table (:func:`tables`); the
kernels' own dispatch is ``handler_kernels.on_runs`` (direct runs), ``on_routed_run``
(routed runs) and the stack's loop (requests).

Adding a message type is a line here, its handler and, for the compiled loop, its kernel
and a branch in that dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .types import (
    ADOPT,
    BN_JOIN,
    BN_SIBLING,
    COLLAPSE_REQ,
    COLLAPSE_WAVE,
    CREATE,
    CREATE_REQ,
    DATA,
    HEARTBEAT,
    JOIN,
    JOIN_ACK,
    JOIN_REFUSE,
    JOIN_REQ,
    LEAVE,
    LEAVE_REQ,
    MCAST,
    MCAST_REQ,
    REFRESH,
    REJOIN,
    REPLICA,
    REPLICA_DATA,
    RP_ADDR,
    TICK,
)

# What a kernel's case needs of the configuration (``Scribe._conditions``): no reliable
# layer (numbering, buffers), no root paths (payloads), no reliable publishing (its
# re-sends), tree repair on (periodic ticks), and the JOIN path compiled (those three and
# no tree shaper, no lazy growth).
PLAIN, NO_PATHS, NO_PUBLISHING, REPAIR, JOIN_PATH = \
    "plain", "no_paths", "no_publishing", "repair", "join_path"

# how the stack's compiled loop takes a run of a type besides a compiled pass's (a cell's
# run of direct messages, with the other direct runs of the pass:
# ``handler_kernels.on_runs``): a run of routed messages at a node (its routing step,
# then the deliver and forward upcalls: ``on_routed_run``), a run of requests whose
# handler routes (the request and the routing step at its node)
ROUTED, REQUEST = "routed", "request"


@dataclass(frozen=True)
class Handler:
    """How Scribe handles one message type.

    ``part``: the attribute of ``Scribe`` holding the part that takes it (a part that is
    off, None, takes nothing). ``receive``/``deliver``: its methods for the type sent
    directly (and self-messages) / routed to its key's node. ``compiled``: its method
    taking a whole cell of the type sent directly in one compiled pass, where every
    condition of ``when`` holds; the stack's compiled loop then takes such runs too.
    ``loop``: :data:`ROUTED` or :data:`REQUEST`, the other runs the compiled loop takes,
    where every condition of ``loop_when`` holds. ``room``: records lent per message of a
    run in the loop at first (raised when a run asks for more)."""

    type: int
    part: str
    receive: str | None = None
    deliver: str | None = None
    compiled: str | None = None
    when: tuple = ()
    loop: str | None = None
    loop_when: tuple = ()
    room: float | None = None


HANDLERS = (
    # a request's sends: its hop and ACK_TIMER, its creator's first TICK timer (a creator
    # that is the RP: the record to each replica)
    Handler(CREATE_REQ, "rendezvous", receive="on_create_req", loop=REQUEST, room=4.0),
    # a CREATE's sends: the record to each replica, the RP's first TICK timer; passing, its
    # hop, the hop's ACK_TIMER and HOP_ACK
    Handler(CREATE, "rendezvous", deliver="on_create", loop=ROUTED, room=4.0),
    Handler(REPLICA, "rendezvous", receive="on_replica", compiled="on_replica", room=0.0),
    Handler(JOIN_REQ, "joins", receive="on_join_req", loop=REQUEST, loop_when=(JOIN_PATH,),
            room=4.0),
    # (a routed run's room includes Pastry's: a HOP_ACK per message, a hop and its
    # ACK_TIMER per message passing; a JOIN's JOIN_ACK and first TICK timer besides)
    Handler(JOIN, "joins", deliver="on_join_at_rp", loop=ROUTED, loop_when=(JOIN_PATH,),
            room=5.0),
    Handler(JOIN_ACK, "joins", receive="on_join_ack", compiled="join_ack_compiled",
            when=(PLAIN, NO_PATHS), room=1.0),
    Handler(JOIN_REFUSE, "joins", receive="on_join_refuse"),
    Handler(REJOIN, "joins", receive="on_rejoin"),
    Handler(BN_JOIN, "joins", receive="on_bn_join"),
    Handler(BN_SIBLING, "bottleneck", receive="on_bn_sibling"),
    Handler(LEAVE_REQ, "leaves", receive="on_leave_req"),
    Handler(LEAVE, "leaves", receive="on_leave"),
    Handler(MCAST_REQ, "multicast", receive="on_mcast_req"),
    Handler(MCAST, "multicast", receive="on_mcast_received", deliver="on_mcast_delivered",
            compiled="mcast_compiled", when=(NO_PUBLISHING,), loop=ROUTED,
            loop_when=(NO_PUBLISHING,), room=4.0),
    Handler(RP_ADDR, "multicast", receive="on_rp_addr", compiled="rp_addr_compiled",
            when=(NO_PUBLISHING,), room=0.0),
    Handler(DATA, "multicast", receive="on_data", compiled="data_compiled", when=(PLAIN,),
            room=4.0),
    Handler(REPLICA_DATA, "publishing", receive="on_replica_data"),
    Handler(TICK, "repair", receive="on_tick", compiled="tick_compiled",
            when=(PLAIN, NO_PATHS, NO_PUBLISHING, REPAIR), room=4.0),
    Handler(HEARTBEAT, "repair", receive="on_heartbeat", compiled="heartbeat_compiled",
            when=(NO_PATHS,), room=1.0),
    Handler(REFRESH, "repair", receive="on_refresh", compiled="refresh_compiled",
            when=(PLAIN,), room=1.0),
    Handler(COLLAPSE_REQ, "collapse", receive="on_collapse_req"),
    # the collapse's kernels are its only implementation (a wave with the reliable layer
    # needs its reset hooks, which run after a cell, not inside a pass of several runs)
    Handler(COLLAPSE_WAVE, "collapse", receive="on_collapse_wave",
            compiled="on_collapse_wave", when=(PLAIN,), room=2.0),
    Handler(ADOPT, "collapse", receive="on_adopt", compiled="on_adopt", room=0.0),
)


@dataclass
class Tables:
    """What :func:`tables` builds for one configured Scribe."""

    on_receive: dict      # type -> method, direct messages
    on_deliver: dict      # type -> method, routed messages at their key's node
    compiled: dict        # type -> method, a whole cell in one compiled pass
    routed_run_types: frozenset
    request_run_types: frozenset
    room: dict            # type -> records lent per message of a run at first


def tables(parts: dict, conditions: dict) -> Tables:
    """The dispatch tables of a Scribe whose parts are ``parts`` (name -> part, None where
    a part is off) and whose configuration meets ``conditions`` (condition -> bool), from
    :data:`HANDLERS`. O(types)."""
    t = Tables({}, {}, {}, frozenset(), frozenset(), {})
    loops = {ROUTED: set(), REQUEST: set()}
    for h in HANDLERS:
        part = parts[h.part]
        if part is None:
            continue
        if h.receive:
            t.on_receive[h.type] = getattr(part, h.receive)
        if h.deliver:
            t.on_deliver[h.type] = getattr(part, h.deliver)
        if h.compiled and all(conditions[c] for c in h.when):
            t.compiled[h.type] = getattr(part, h.compiled)
        if h.loop is not None and all(conditions[c] for c in h.loop_when):
            loops[h.loop].add(h.type)
        if h.room is not None:
            t.room[h.type] = h.room
    t.routed_run_types = frozenset(loops[ROUTED])
    t.request_run_types = frozenset(loops[REQUEST])
    return t
