"""Pastry message type codes (10-49, ARCHITECTURE.md) and their names for logs."""

JOIN_START = 10    # timer: a node starts joining (a = nearby node A or -1)
JOIN_REQ = 11      # X -> A direct: please route my join (a = X)
JOIN = 12          # routed towards X's id (origin = X, a = the hop index)
JOIN_ROWS = 13     # route node -> X: its routing-table rows 0..spl (payload: 2^b ids per row)
JOIN_LEAFS = 14    # Z -> X: Z's leaf set (payload) ; a = Z
JOIN_NBRS = 15     # A -> X: A's neighbourhood set (payload)
ANNOUNCE = 16      # X -> a node of its new state: "I joined" (receivers insert X)
JOIN_DONE = 17     # timer: X has its state; probe candidates and announce
KEEPALIVE = 20     # leaf-set member -> leaf-set member
KA_TIMER = 21      # timer: send keep-alives, check silent leaves
LEAF_REQ = 22      # ask a surviving leaf for its leaf set (leaf-set repair)
LEAF_REPLY = 23    # the leaf set (payload)
ROW_REQ = 24       # lazy routing-table repair: ask a node for a table entry (a = row, b = column,
                   # hops = attempt number, echoed in the reply)
ROW_REPLY = 25     # the entry (a = row, b = column, c = node or -1, hops = attempt number)
HOP_ACK = 26       # receiver of a routed hop -> sender (origin, key, b = type, c = hops: the hop)
ACK_TIMER = 27     # timer: routed hops of this node past their ack deadline were lost
LEAF_REFRESH = 28  # timer (protocol bootstrap): look up my own id (LEAF_LOOKUP)
LEAF_LOOKUP = 29   # routed towards the origin's own id; the node it reaches, if not the
                   # origin, answers with its leaf set (LEAF_REPLY)
ROWS_REQ = 30      # joined X -> a node of its table row r (a = r): send me your row r
ROWS_REPLY = 31    # the row (payload), a = r

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


def is_pastry_type(code) -> bool:
    return 10 <= int(code) <= 49
