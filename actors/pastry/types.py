"""Pastry message type codes (10-49, ARCHITECTURE.md), their names for logs, and what each
type keeps in the record's type-specific columns a, b, c (``actors.messages.TypeFields``:
handlers read ``m[RowReq.row]``, senders pass ``**RowReq.fields(row=..., column=...)``)."""

from actors.messages import TypeFields

JOIN_START = 10    # timer: a node starts joining (or a recovered node tries a contact)


class JoinStart(TypeFields):
    contact = "a"      # the nearby node A to ask, -1: none (the first node forms the overlay)
    attempt = "b"      # 0: a first join; k + 1: a recovered node's rejoin through contact k
    incarnation = "c"  # rejoin: the node's incarnation when set (a timer of an older one
                       # is void)


JOIN_REQ = 11      # X -> A direct: please route my join (also A's own retry timer)


class JoinReq(TypeFields):
    joiner = "a"       # X
    retries = "c"      # times A held the request while itself not yet joined


JOIN = 12          # routed towards X's id (origin = X)


class Join(TypeFields):
    joiner = "a"       # X (the route nodes send it their rows)


JOIN_ROWS = 13     # route node -> X: its routing-table rows 0..spl (payload: 2^b ids per row)
JOIN_LEAFS = 14    # Z -> X: Z's leaf set (payload)


class JoinLeafs(TypeFields):
    route_nodes = "a"  # nodes on X's join route: the JOIN_ROWS X waits for


JOIN_NBRS = 15     # A -> X: A's neighbourhood set (payload)
ANNOUNCE = 16      # X -> a node of its new state: "I joined" (receivers insert X)


class Announce(TypeFields):
    announcer = "a"    # X (the sender)
    in_leaf_set = "b"  # 1: the receiver is in X's leaf set (it answers with its leaf set)


JOIN_DONE = 17     # timer: X has its state; probe candidates and announce
KEEPALIVE = 20     # leaf-set member -> leaf-set member


class Keepalive(TypeFields):
    is_reply = "b"     # 1: the answer to a stranger's keep-alive (never answered itself)


KA_TIMER = 21      # timer: send keep-alives, check silent leaves


class KaTimer(TypeFields):
    incarnation = "c"  # the node's incarnation when set (void after a crash and recovery)


LEAF_REQ = 22      # ask a surviving leaf for its leaf set (leaf-set repair)
LEAF_REPLY = 23    # the leaf set (payload)
ROW_REQ = 24       # lazy routing-table repair: ask a node for a table entry
                   # (hops = attempt number, echoed in the reply)


class RowReq(TypeFields):
    row = "a"          # the slot's row
    column = "b"       # the slot's column


ROW_REPLY = 25     # the entry (hops = attempt number)


class RowReply(RowReq):
    entry = "c"        # the answering node's entry of the slot, -1: none


HOP_ACK = 26       # receiver of a routed hop -> sender (origin, key: of the acked hop)


class HopAck(TypeFields):
    acked_type = "b"   # type code of the acknowledged message
    acked_hops = "c"   # its hops field (with origin and key: which hop is acknowledged)


ACK_TIMER = 27     # timer: routed hops of this node past their ack deadline were lost
LEAF_REFRESH = 28  # timer (protocol bootstrap): look up my own id (LEAF_LOOKUP)


class LeafRefresh(TypeFields):
    table_tick = "a"    # 1: a routing-table maintenance tick instead (sends ROWS_REQ)
    lookups_done = "b"  # own-id lookups made so far (bounded by leaf_refresh_rounds)
    incarnation = "c"   # the node's incarnation when set (void after a crash and recovery)


LEAF_LOOKUP = 29   # routed towards the origin's own id; the node it reaches, if not the
                   # origin, answers with its leaf set (LEAF_REPLY)
ROWS_REQ = 30      # joined X -> a node of its table row r: send me your row r


class RowsReq(TypeFields):
    row = "a"          # r


ROWS_REPLY = 31    # the row (payload)


class RowsReply(RowsReq):
    """row: r, as in the request."""


TYPE_NAMES = {
    JOIN_START: "pastry_join_start",
    JOIN_REQ: "pastry_join_req",
    JOIN: "pastry_join",
    JOIN_ROWS: "pastry_join_rows",
    JOIN_LEAFS: "pastry_join_leafs",
    JOIN_NBRS: "pastry_join_nbrs",
    ANNOUNCE: "pastry_announce",
    JOIN_DONE: "pastry_join_done",
    KEEPALIVE: "pastry_keepalive",
    KA_TIMER: "pastry_ka_timer",
    LEAF_REQ: "pastry_leaf_req",
    LEAF_REPLY: "pastry_leaf_reply",
    ROW_REQ: "pastry_row_req",
    ROW_REPLY: "pastry_row_reply",
    HOP_ACK: "pastry_hop_ack",
    ACK_TIMER: "pastry_ack_timer",
    LEAF_REFRESH: "pastry_leaf_refresh",
    LEAF_LOOKUP: "pastry_leaf_lookup",
    ROWS_REQ: "pastry_rows_req",
    ROWS_REPLY: "pastry_rows_reply",
}


FIRST_OWN, LAST_OWN = 10, 49   # Pastry's own type codes
# The own types that travel routed (mode 1): every other own type is sent direct, so its
# batches go straight to its handler (no look at the records' mode).
ROUTED_TYPES = frozenset({JOIN, LEAF_LOOKUP})


def is_pastry_type(code) -> bool:
    return FIRST_OWN <= int(code) <= LAST_OWN
