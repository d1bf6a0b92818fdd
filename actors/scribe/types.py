"""Scribe message type codes (50-89, see docs/ARCHITECTURE.md) and their names for logs.

Requests (``*_REQ``) are self-messages injected by the scenario (src = dst = the node);
the others travel between nodes, routed by Pastry (``mode`` 1) or sent directly (``mode`` 0).
"""

# application requests (self-messages at the requesting node)
CREATE_REQ = 50
JOIN_REQ = 51
LEAVE_REQ = 52
MCAST_REQ = 53
COLLAPSE_REQ = 54

# tree construction and maintenance
CREATE = 60        # routed to the groupId; a = credential (becomes the ACL token)
JOIN = 61          # routed to the groupId; a = credential of the joiner, b = last seqno
JOIN_ACK = 62      # parent -> new child; a = ACL token, b = depth of the parent
JOIN_REFUSE = 63   # a = refused credential
LEAVE = 64         # child -> parent
REJOIN = 65        # parent -> child: your branch was refused for another credential, join again
MCAST = 66         # source -> RP (routed the first time, then direct); a = credential,
                   # b = seqno (reliable layer: the source's own seqno), c = publish time
RP_ADDR = 67       # RP -> source: cache my address (a = RP node); reliable layer: sent for
                   # every MCAST, b = the source's last seqno numbered (cumulative ack)
DATA = 68          # tree dissemination; a = publish time, b = seqno, c = overlay hops so far
COLLAPSE_WAVE = 70  # a = nearest kept ancestor, b = first removed node below it (-1: none)
ADOPT = 71          # kept node -> its new parent; a = the removed child it replaces
BN_SIBLING = 72     # overloaded parent -> dropped child, one per former sibling:
                    # a = sibling, b = delay parent->sibling, c = the parent
BN_JOIN = 73        # dropped child -> chosen sibling; a = credential, b = last seqno
TICK = 80           # per-node maintenance timer (heartbeats, refresh, expiry, suspicion)
HEARTBEAT = 81      # parent -> child
REFRESH = 82        # child -> parent: keep my children-table entry
REPLICA = 83        # RP -> its k closest nodes: a = ACL token, b = creator
REPLICA_DATA = 84   # reliable layer: RP -> its k closest nodes, each numbered message:
                    # a = publish time, b = seqno, c = source seqno, origin = source

TYPE_NAMES = {
    CREATE_REQ: "scribe_create_req",
    JOIN_REQ: "scribe_join_req",
    LEAVE_REQ: "scribe_leave_req",
    MCAST_REQ: "scribe_mcast_req",
    COLLAPSE_REQ: "scribe_collapse_req",
    CREATE: "scribe_create",
    JOIN: "scribe_join",
    JOIN_ACK: "scribe_join_ack",
    JOIN_REFUSE: "scribe_join_refuse",
    LEAVE: "scribe_leave",
    REJOIN: "scribe_rejoin",
    MCAST: "scribe_mcast",
    RP_ADDR: "scribe_rp_addr",
    DATA: "scribe_data",
    COLLAPSE_WAVE: "scribe_collapse_wave",
    ADOPT: "scribe_adopt",
    BN_SIBLING: "scribe_bn_sibling",
    BN_JOIN: "scribe_bn_join",
    TICK: "scribe_tick",
    HEARTBEAT: "scribe_heartbeat",
    REFRESH: "scribe_refresh",
    REPLICA: "scribe_replica",
    REPLICA_DATA: "scribe_replica_data",
}

SCRIBE_TYPES = tuple(sorted(TYPE_NAMES))
