"""Per-shard Scribe tree state in compact arrays: the part every other part of Scribe
reads and writes (children tables, parents, group records as known to each node).

A *slot* is one (local node, group) pair the node has state for: forwarder/member/root
flags, its parent, the group's ACL as known to the node, counters. Slots are found by the
key ``local_idx * n_groups + group`` through a KeyIndex. A *child entry* is one
(slot, child node) pair, keyed ``slot * n_nodes + child``; the children of a slot are a
contiguous key range, so they come out sorted by child id (deterministic fan-out order).
Nothing is ever deleted: slots and entries carry an ``active``/``valid`` flag and are
revived when the same key comes back.
"""

from __future__ import annotations

import functools

import numpy as np

from emulator.kernels import unique_first

from . import handler_kernels, kernels
from .keyindex import KeyIndex
from .types import DATA, Join

_SLOT_COLS = {
    "node": ("i4", -1),        # local index of the node
    "group": ("i4", -1),
    "active": ("?", False),    # the node has a children table / is on the tree
    "member": ("?", False),
    "root": ("?", False),      # the node is the group's RP (holds the group record)
    "parent": ("i4", -1),      # global id of the parent, -1 for none / the root
    "acl": ("i8", -1),         # the group's credential token as known here (-1 unknown)
    "creator": ("i4", -1),     # RP record: node that created the group
    "my_cred": ("i8", -1),     # credential the local member joined with
    "join_cred": ("i8", -1),   # credential carried by this node's own JOIN
    "n_children": ("i4", 0),
    "last_seq": ("i8", -1),    # last multicast seqno seen (reliable layer / diagnostics)
    "rp_cache": ("i4", -1),    # as a source: the RP's address once learned
    "rp_cache_time": ("i8", -1),  # when it was learned
    "last_heard": ("i8", -1),  # last heartbeat / data / ack from the parent (-1: not yet)
    "last_sent": ("i8", -1),   # last heartbeat / data sent to the children
    "rep_acl": ("i8", -1),     # replica of the RP's record (held by the k closest nodes)
    "rep_creator": ("i4", -1),
    "synced": ("?", False),    # reliable layer: last_seq is a valid in-order position
    "src_seq": ("i8", 0),      # reliable layer, as a source: next source seqno
    "rep_seq": ("i8", -1),     # reliable layer, as a replica: last seqno replicated
    "top_seq": ("i8", -1),     # reliable layer: newest seqno buffered here (above last_seq
                               # while later messages wait behind a gap)
}

# what a reset sets back to its default (False, -1): the node's position on the tree and
# what it knew there
_RESET_FLAGS = ("active", "member", "root", "synced")
_RESET_SMALL = ("parent", "creator")
_RESET_WIDE = ("acl", "my_cred", "join_cred", "last_seq", "top_seq", "last_heard", "last_sent")
assert all(_SLOT_COLS[c] == ("?", False) for c in _RESET_FLAGS)
assert all(_SLOT_COLS[c] == ("i4", -1) for c in _RESET_SMALL)
assert all(_SLOT_COLS[c] == ("i8", -1) for c in _RESET_WIDE)

_ENTRY_COLS = {
    "slot": ("i4", -1),
    "child": ("i4", -1),
    "valid": ("?", False),
    "cred": ("i8", -1),        # credential the child's JOIN carried
    "refresh": ("i8", 0),      # last time the child (re)joined
}


def first_in_run(keys: np.ndarray) -> np.ndarray:
    """Mask of the first occurrence of each key value (rows keep their given order)."""
    first = np.zeros(len(keys), bool)
    if len(keys):
        # (int64, as the compiled callers pass keys: one compile)
        first[unique_first(np.ascontiguousarray(keys, np.int64))[1]] = True
    return first


class _Columns:
    """Named numpy columns with amortized-doubling growth."""

    def __init__(self, spec: dict, capacity: int = 1024):
        self.spec = spec
        self.cols = {name: np.full(capacity, fill, dtype=dt) for name, (dt, fill) in spec.items()}

    def ensure(self, n: int):
        cap = len(next(iter(self.cols.values())))
        if n <= cap:
            return
        new_cap = max(n, 2 * cap)
        for name, (dt, fill) in self.spec.items():
            arr = np.full(new_cap, fill, dtype=dt)
            arr[:cap] = self.cols[name]
            self.cols[name] = arr

    def __getitem__(self, name):
        return self.cols[name]


class TreeState:
    def __init__(self, n_local: int, n_nodes: int, n_groups: int):
        self.n_local, self.n_nodes, self.n_groups = n_local, n_nodes, max(int(n_groups), 1)
        self.slot_index = KeyIndex(self.n_groups)       # key local node x group
        self.entry_index = KeyIndex(n_nodes)            # key slot x child
        self.slots = _Columns(_SLOT_COLS)
        self.entries = _Columns(_ENTRY_COLS)
        self.node_children = np.zeros(n_local, dtype=np.int64)  # total children, all groups
        # called with the slots `reset` forgets (the reliable layer drops their buffered
        # messages: a buffer that outlives the position it belongs to hides gaps)
        self.on_reset: list = []

    # ---- slots ------------------------------------------------------------------
    def slot_keys(self, local_idx, groups):
        return np.asarray(local_idx, np.int64) * self.n_groups + np.asarray(groups, np.int64)

    def find(self, local_idx, groups, only_active=False) -> np.ndarray:
        """Slot of each (local node, group) (int32), -1 if the node never had state (or,
        ``only_active``, has no active state). O(q)."""
        li, g = _pairs(local_idx, groups)
        return kernels.find_slots(self.slot_index.arrays, li, g, self.n_groups,
                                  self.slots["active"], only_active)

    def find_active(self, local_idx, groups) -> np.ndarray:
        return self.find(local_idx, groups, only_active=True)

    def get_or_make(self, local_idx, groups) -> np.ndarray:
        """Slot of each pair, creating inactive slots where needed. O(q), amortized."""
        s, new = self.slot_index.insert(self.slot_keys(local_idx, groups))
        self.slots.ensure(self.slot_index.size)
        if new.any():
            self.slots["node"][s[new]] = local_idx[new] if np.ndim(local_idx) else local_idx
            self.slots["group"][s[new]] = np.asarray(groups)[new]
        return s

    def make_room(self, slots: int, entries: int) -> None:
        """Room for ``slots`` new slots and ``entries`` new child entries, for a compiled
        handler (``handler_kernels``) that adds them itself (``keyindex.insert_key``) and
        then reports the sizes it reached (:meth:`inserted`). Take the index arrays and
        columns after this call: growing replaces them. Amortized O(1)."""
        si, ei = self.slot_index, self.entry_index
        si.make_room(slots, self.n_local)
        self.slots.ensure(si.size + slots)
        ei.make_room(entries, si.size + slots)     # (a new slot's children: a new prefix)
        self.entries.ensure(ei.size + entries)

    def inserted(self, n_slots: int, n_entries: int) -> None:
        """A compiled handler added slots and entries up to these sizes (after
        :meth:`make_room`)."""
        self.slot_index.size = int(n_slots)
        self.entry_index.size = int(n_entries)

    def reset(self, slots):
        """Forget the node's tree state for these slots (the key keeps its slot)."""
        kernels.reset_slots(np.ascontiguousarray(slots, np.int64), *self.reset_columns())
        for forget in self.on_reset:
            forget(slots)

    def reset_columns(self) -> tuple:
        """The columns a reset sets back (``kernels.reset_slot``): the flags (to False),
        then the int32 and int64 ones (to -1), each group a tuple."""
        sl = self.slots
        return (tuple(sl[c] for c in _RESET_FLAGS), tuple(sl[c] for c in _RESET_SMALL),
                tuple(sl[c] for c in _RESET_WIDE))

    def repair_join(self, slots, credential) -> dict:
        """faultHandler: the fields of these slots' repair JOIN (or BN_JOIN: the same
        fields), with ``credential``: the repair flag and their position (their last
        seqno), which they keep from now on (``synced``). The new parent re-sends what
        follows it, and its JOIN_ACK comes with those copies: a slot that never had a
        message (-1, so it asks for all of them) must not take the ack's position (the
        parent's) as its start, or it drops the copies re-sent for it as old ones."""
        self.slots["synced"][slots] = True
        return Join.fields(credential=credential, last_seq=self.slots["last_seq"][slots],
                           repair=np.ones(len(slots), np.int64))

    def heard_from_parent(self, local_idx, groups, senders, times) -> np.ndarray:
        """Messages from the current parent (heartbeats, data) reset the suspicion clock.
        Returns the mask of rows that came from the receiving slot's parent."""
        sl = self.slots
        li, g = _pairs(local_idx, groups)
        return kernels.heard_from_parent(self.slot_index.arrays, li, g,
                                         self.n_groups, sl["active"], sl["parent"],
                                         np.asarray(senders), np.asarray(times),
                                         sl["last_heard"])

    def drop_nodes(self, local_idx) -> None:
        """Crashed nodes lose all their tree state (children, records, RP cache)."""
        act = self.active_slots()
        gone = act[np.isin(self.slots["node"][act], local_idx)]
        self.clear_children(gone)
        self.reset(gone)
        self.slots["rp_cache"][gone] = -1

    # ---- children ---------------------------------------------------------------
    def add_children(self, slots, children, creds, now) -> np.ndarray:
        """Add (slot, child) entries (idempotent). Returns a mask of the rows that were new
        children. Rows must not repeat a (slot, child) pair unless idempotence is wanted."""
        keys = np.asarray(slots, np.int64) * self.n_nodes + np.asarray(children, np.int64)
        e, _ = self.entry_index.insert(keys)
        self.entries.ensure(self.entry_index.size)
        en, sl = self.entries, self.slots
        # only the first row of a repeated pair may count as new (one compiled pass)
        return kernels.write_children(e, np.asarray(slots), np.asarray(children),
                                      np.asarray(creds), np.asarray(now), en["valid"],
                                      en["slot"], en["child"], en["cred"], en["refresh"],
                                      sl["n_children"], self.node_children, sl["node"])

    def remove_children(self, slots, children) -> np.ndarray:
        """Remove (slot, child) entries; returns a mask of rows that removed something (a
        pair repeated is removed once). O(q)."""
        sl = self.slots
        return kernels.remove_children(np.ascontiguousarray(slots, np.int64),
                                       np.ascontiguousarray(children, np.int64),
                                       self.entry_index.arrays, self.n_nodes,
                                       self.entries["valid"], sl["n_children"],
                                       self.node_children, sl["node"])

    def children_of(self, slots) -> tuple[np.ndarray, np.ndarray]:
        """Valid child entries of the given slots: (row index into slots, entry id),
        ordered by row then child id. O(q + output)."""
        return self.entry_index.within(slots, self.entries["valid"])

    def clear_children(self, slots) -> tuple[np.ndarray, np.ndarray]:
        """Drop every child of the slots; returns the removed (row, entry) pairs."""
        qi, e = self.children_of(slots)
        sl = self.slots
        kernels.clear_children(np.ascontiguousarray(slots, np.int64), self.entry_index.arrays,
                               self.entries["valid"], sl["n_children"], self.node_children,
                               sl["node"])
        return qi, e

    # ---- snapshots --------------------------------------------------------------
    def slots_of_nodes(self, local_idx) -> tuple[np.ndarray, np.ndarray]:
        """Active slots of each local node: (row index into local_idx, slot), in group
        order. O(q + output)."""
        return self.slot_index.within(local_idx, self.slots["active"])

    def tick_plan(self, local_idx, times, period: int, silent_after: int, stale_after: int):
        """``kernels.tick_plan`` on this state: a TICK cell's slots, refreshes and
        heartbeats in one compiled pass, or None (nothing written) when a parent is silent
        or a child stale, which the general path handles."""
        si, ei, sl, en = self.slot_index, self.entry_index, self.slots, self.entries
        plan = kernels.tick_plan(si.arrays, ei.arrays, np.ascontiguousarray(local_idx, np.int64),
                                 np.ascontiguousarray(times, np.int64), self.n_groups,
                                 self.n_nodes, sl["active"], sl["root"], sl["parent"],
                                 sl["last_heard"], sl["last_sent"], en["valid"],
                                 en["refresh"], int(period), int(silent_after),
                                 int(stale_after))
        return plan[1:] if plan[0] else None

    def active_slots(self) -> np.ndarray:
        return np.flatnonzero(self.slots["active"][: self.slot_index.size])

    def state(self) -> dict:
        n_s, n_e = self.slot_index.size, self.entry_index.size
        return {"dims": (self.n_local, self.n_nodes, self.n_groups),
                "slot_index": self.slot_index.state(), "entry_index": self.entry_index.state(),
                "slots": {k: v[:n_s] for k, v in self.slots.cols.items()},
                "entries": {k: v[:n_e] for k, v in self.entries.cols.items()},
                "node_children": self.node_children}

    @classmethod
    def from_state(cls, st: dict) -> TreeState:
        t = cls(*st["dims"])
        t.slot_index = KeyIndex.from_state(st["slot_index"], t.n_groups)
        t.entry_index = KeyIndex.from_state(st["entry_index"], t.n_nodes)
        t.slots.ensure(max(t.slot_index.size, 1))
        t.entries.ensure(max(t.entry_index.size, 1))
        for k, v in st["slots"].items():
            t.slots[k][: len(v)] = v
        for k, v in st["entries"].items():
            t.entries[k][: len(v)] = v
        t.node_children = st["node_children"].copy()
        return t


def _pairs(local_idx, groups) -> tuple[np.ndarray, np.ndarray]:
    """(local_idx, groups) as int64 arrays of one length (a scalar is repeated)."""
    li = np.asarray(local_idx, np.int64)
    g = np.asarray(groups, np.int64)
    if li.shape != g.shape:
        li, g = np.broadcast_arrays(li, g)
    return li.reshape(-1), g.reshape(-1)


def disseminate_at_slots(tree: TreeState, messenger, ctx, s, nodes, group, source, publish,
                         seqno, hops, now, numbered: bool = False) -> np.ndarray:
    """Dissemination at tree slots ``s`` (rows: its node, group and message), compiled
    (``handler_kernels.disseminate_rows``, the rule's one implementation): each slot sends
    one DATA copy to every child, and remembers when it last sent (the copies count as
    heartbeats). ``numbered`` (without the reliable layer): each slot's ``last_seq`` is
    raised to the seqno first, and the rows whose slot is a member's are returned (their
    deliveries); else none. O(rows + children of the slots)."""
    qi, e = tree.children_of(s)
    if not numbered and not len(e):
        return np.empty(0, np.int64)     # no copy to send, no state to change
    sl, keys = tree.slots, messenger.groups.table
    i64 = functools.partial(np.ascontiguousarray, dtype=np.int64)   # (one kernel signature)
    return messenger.run_compiled(
        ctx, len(e), handler_kernels.disseminate_sends, i64(s), i64(nodes), i64(group),
        i64(source), i64(now), i64(publish), i64(seqno), i64(hops), i64(qi), i64(e),
        np.bool_(numbered), sl["last_seq"], sl["last_sent"], sl["member"],
        tree.entries["child"], keys["id_hi"], keys["id_lo"], DATA)[0]
