"""Scribe message type codes (50-89, see docs/ARCHITECTURE.md), their names for logs, and
what each type keeps in the record's type-specific columns a, b, c
(``actors.messages.TypeFields``: handlers read ``m[JoinAck.acl]``, senders pass
``**JoinAck.fields(acl=..., parent_seq=...)``).

Requests (``*_REQ``) are self-messages injected by the scenario (src = dst = the node);
the others travel between nodes, routed by Pastry (``mode`` 1) or sent directly (``mode`` 0).
The reliable layer (``reliable``) uses fields of MCAST, RP_ADDR, JOIN, REFRESH
and JOIN_ACK and its own REPLICA_DATA.
"""

from actors.messages import TypeFields

# ---- application requests (self-messages at the requesting node) ----------------------
CREATE_REQ = 50
JOIN_REQ = 51
LEAVE_REQ = 52
MCAST_REQ = 53
COLLAPSE_REQ = 54


class Request(TypeFields):
    """CREATE_REQ, JOIN_REQ, LEAVE_REQ, MCAST_REQ (COLLAPSE_REQ has no fields)."""
    credential = "a"   # the requester's credential for the group


CreateReq = JoinReq = LeaveReq = Request


class McastReq(Request):
    seqno = "b"        # the message's seqno as given (reliable layer: unused, the source
                       # and the root number the messages)

# ---- tree construction and maintenance -----------------------------------------------
CREATE = 60        # routed to the groupId


class Create(TypeFields):
    credential = "a"   # the creator's credential (becomes the ACL token)


JOIN = 61          # routed to the groupId


class Join(TypeFields):
    credential = "a"   # the joiner's credential
    last_seq = "b"     # the joiner's last seqno (-1: none; the reliable layer's position)
    repair = "c"       # 1: a repair JOIN (reliable layer: the new parent retransmits the
                       # messages after last_seq)


JOIN_ACK = 62      # parent -> new child


# Root paths on (``root_paths``): JOIN_ACK and HEARTBEAT carry the sender's path to the
# root as payload, and its length here
ROOT_PATH_LENGTH = "c"


class JoinAck(TypeFields):
    acl = "a"          # the group's ACL token (-1: not known)
    parent_seq = "b"   # reliable layer: the parent's last seqno (a fresh joiner starts there)
    path_length = ROOT_PATH_LENGTH


JOIN_REFUSE = 63


class JoinRefuse(TypeFields):
    credential = "a"   # the refused credential


LEAVE = 64         # child -> parent
REJOIN = 65        # parent -> child: your branch was refused for another credential, join again
MCAST = 66         # source -> RP (routed the first time, then direct); origin = the source


class Mcast(TypeFields):
    credential = "a"    # the source's credential
    seqno = "b"         # the request's seqno; reliable layer: the source's own numbering
    publish_time = "c"  # when the source published it


RP_ADDR = 67       # RP -> source: cache my address; reliable layer: sent for every MCAST


class RpAddr(TypeFields):
    rp = "a"           # the RP node
    acked_seq = "b"    # reliable layer: the source's last seqno numbered (cumulative ack)


DATA = 68          # tree dissemination; origin = the source


class Data(TypeFields):
    publish_time = "a"  # when the source published it
    seqno = "b"         # the message's seqno (reliable layer: the root's numbering)
    total_hops = "c"    # overlay hops of the MCAST to the RP + tree hops so far


COLLAPSE_WAVE = 70


class CollapseWave(TypeFields):
    ancestor = "a"       # the nearest kept ancestor
    first_removed = "b"  # the first removed node below it (-1: none)


ADOPT = 71          # kept node -> its new parent


class Adopt(TypeFields):
    replaced = "a"     # the removed child it replaces


BN_SIBLING = 72     # overloaded parent -> dropped child, one per former sibling


class BnSibling(TypeFields):
    sibling = "a"        # the former sibling
    sibling_delay = "b"  # delay parent -> sibling, us
    parent = "c"         # the parent that dropped the child


BN_JOIN = 73        # dropped child -> chosen sibling: a JOIN that stops there


class BnJoin(Join):
    """credential, last_seq, repair (= 1): as a JOIN's."""


TICK = 80           # per-node maintenance timer (heartbeats, refresh, expiry, suspicion)
HEARTBEAT = 81      # parent -> child


class Heartbeat(TypeFields):
    path_length = ROOT_PATH_LENGTH


REFRESH = 82        # child -> parent: keep my children-table entry


class Refresh(TypeFields):
    credential = "a"   # the child's JOIN credential
    last_seq = "b"     # reliable layer: the child's last seqno (a re-admitted child is
                       # caught up from there)


REPLICA = 83        # RP -> its k closest nodes: the group record


class Replica(TypeFields):
    acl = "a"          # the ACL token
    creator = "b"      # the creator node


REPLICA_DATA = 84   # reliable layer: RP -> its k closest nodes, each numbered message;
                    # origin = the source


class ReplicaData(TypeFields):
    publish_time = "a"  # when the source published it
    seqno = "b"         # the root's seqno
    source_seq = "c"    # the source's own seqno


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
