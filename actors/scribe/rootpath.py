"""Root paths for loop detection under the bottleneck remover (SPEC 3).

Moving a dropped child under a former sibling cannot close a loop on a stable tree, but
under failures and concurrent moves it can. Each parent passes its *root path* (the ids
from the RP down to itself) to its children, on the JOIN_ACK and on heartbeats, and again
at once whenever it changes; a node that finds itself in the path it receives, or gets a
JOIN from a node on its own root path, re-joins by a randomized Pastry route.

``RootPathGuard`` is the part of Scribe that keeps them; every other part goes through
its ``lose_parent`` when a slot leaves its parent (the path is then unknown). With root
paths off it still does that, and its checks find nothing.

A slot's path is stored as a fixed-width int32 row (-1 padded) plus a length: -1 means
unknown (the node is between parents), 0 the RP itself. Paths longer than the width are
treated like loops (no Scribe tree on 10^5-10^6 nodes is that deep unless it loops).
On the wire the path rides in the message payload and ``c`` holds its length
(-1 unknown, ``width + 1`` overflow).
"""

from __future__ import annotations

import numpy as np

from .tree import TreeState, first_in_run
from .types import HEARTBEAT, JOIN, LEAVE, ROOT_PATH_LENGTH
from .wire import Messenger, pack_rows, payload_rows

UNKNOWN = -1


class RootPaths:
    def __init__(self, width: int):
        if int(width) < 2:
            raise ValueError(f"Scribe: root_path_max must be at least 2, got {width!r}")
        self.width = int(width)
        self.ids = np.full((0, self.width), -1, np.int32)
        self.length = np.zeros(0, np.int16)

    def _ensure(self, slots) -> None:
        need = int(np.max(slots)) + 1 if len(slots) else 0
        cap = len(self.length)
        if need <= cap:
            return
        new = max(need, 2 * cap, 1024)
        ids = np.full((new, self.width), -1, np.int32)
        ids[:cap] = self.ids
        length = np.full(new, UNKNOWN, np.int16)
        length[:cap] = self.length
        self.ids, self.length = ids, length

    def forget(self, slots) -> None:
        """The slots are between parents: their path is unknown until the next ack."""
        slots = np.asarray(slots, np.int64)
        self._ensure(slots)
        self.length[slots] = UNKNOWN

    def lengths(self, slots) -> np.ndarray:
        slots = np.asarray(slots, np.int64)
        self._ensure(slots)
        return self.length[slots].astype(np.int64)

    def store(self, slots, rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Set the paths of `slots` (rows -1 padded to any width <= self.width).
        Returns the mask of slots whose path changed. O(n x width)."""
        slots = np.asarray(slots, np.int64)
        self._ensure(slots)
        new = np.full((len(slots), self.width), -1, np.int32)
        w = min(rows.shape[1], self.width) if rows.ndim == 2 else 0
        new[:, :w] = rows[:, :w]
        lengths = np.asarray(lengths, np.int16)
        changed = (self.length[slots] != lengths) | (self.ids[slots] != new).any(axis=1)
        self.ids[slots] = new
        self.length[slots] = lengths
        return changed

    def contains(self, slots, nodes) -> np.ndarray:
        """Whether each node is on the (known) root path of the matching slot."""
        slots = np.asarray(slots, np.int64)
        self._ensure(slots)
        hit = (self.ids[slots] == np.asarray(nodes, np.int64)[:, None]).any(axis=1)
        return hit & (self.length[slots] > 0)

    def outgoing(self, slots, me, is_root) -> tuple[np.ndarray, np.ndarray]:
        """What each slot's node tells its children: its path with itself appended.
        Returns (rows int64 (n, width), lengths: -1 unknown, width + 1 overflow)."""
        slots = np.asarray(slots, np.int64)
        self._ensure(slots)
        n = len(slots)
        length = np.where(np.asarray(is_root, bool), 0, self.length[slots].astype(np.int64))
        rows = np.where(np.asarray(is_root, bool)[:, None], -1,
                        self.ids[slots].astype(np.int64))
        known = length >= 0
        fits = known & (length < self.width)
        rows[np.flatnonzero(fits), length[fits]] = np.asarray(me, np.int64)[fits]
        out_len = np.where(~known, UNKNOWN, np.where(fits, length + 1, self.width + 1))
        if n == 0:
            return rows.reshape(0, self.width), out_len
        return rows, out_len

    def state(self) -> dict:
        return {"width": self.width, "ids": self.ids, "length": self.length}

    @classmethod
    def from_state(cls, st: dict) -> RootPaths:
        p = cls(st["width"])
        p.ids, p.length = st["ids"].copy(), st["length"].copy()
        return p


def encode(rows: np.ndarray, lengths: np.ndarray) -> dict:
    """Message fields carrying one path per message (JOIN_ACK, HEARTBEAT): payload,
    pay_off, pay_len and the path length (``ROOT_PATH_LENGTH``)."""
    return {**pack_rows(rows), ROOT_PATH_LENGTH: np.asarray(lengths, np.int64)}


def decode(m: np.ndarray, payload: np.ndarray, width: int) -> np.ndarray:
    """The paths carried by messages m as rows (n, width), -1 padded."""
    return payload_rows(m, payload, width)


class RootPathGuard:
    """Parent links and their root paths: loses parents, passes paths down, breaks loops.

    ``paths`` is a RootPaths, or None when root paths are off."""

    def __init__(self, tree: TreeState, messenger: Messenger, paths: RootPaths | None):
        self.tree = tree
        self.messenger = messenger
        self.paths = paths

    def lose_parent(self, s) -> None:
        """Slots s are between parents: no parent, root path unknown until the next ack."""
        self.tree.slots["parent"][s] = -1
        if self.paths is not None:
            self.paths.forget(s)

    def path_fields(self, s, me) -> dict:
        """Message fields telling children the root path of slots s (one row per message)."""
        if self.paths is None:
            return {}
        rows, lens = self.paths.outgoing(s, me, self.tree.slots["root"][s])
        return encode(rows, lens)

    def take_path(self, ctx, m, s) -> None:
        """Messages m come from the current parents of slots s and carry their root paths:
        store them; a node on its own path (or past the width) re-joins at random; nodes
        whose path changed tell their children at once. O(n x width)."""
        if self.paths is None or not len(s):
            return
        w = self.paths.width
        rows = decode(m, self.messenger.payload, w)
        lens = m[ROOT_PATH_LENGTH].astype(np.int64)
        me = m["dst"].astype(np.int64)
        loop = (lens > w) | (rows == me[:, None]).any(axis=1)
        keep = ~loop
        changed = self.paths.store(s[keep], rows[keep], np.where(lens[keep] > w, -1, lens[keep]))
        push = changed & (lens[keep] >= 0)
        self._push_paths(ctx, s[keep][push], me[keep][push], m["time"][keep][push])
        self.rejoin_randomized(ctx, s[loop], me[loop], m["time"][loop], "scribe_loops_path")

    def _push_paths(self, ctx, s, me, now) -> None:
        """Heartbeats carrying the new root path to every child of slots s."""
        if not len(s):
            return
        first = first_in_run(s)
        s, me, now = s[first], me[first], now[first]
        qi, e = self.tree.children_of(s)
        if not len(e):
            return
        self.messenger.send(ctx, me[qi], self.tree.entries["child"][e], HEARTBEAT, now[qi],
                            self.tree.slots["group"][s][qi], **self.path_fields(s[qi], me[qi]))
        self.tree.slots["last_sent"][s] = now

    def on_own_path(self, s, nodes) -> np.ndarray:
        """Rows whose sender is on the receiving slot's root path (a JOIN that would loop)."""
        if self.paths is None or not len(s):
            return np.zeros(len(s), bool)
        return self.paths.contains(s, nodes)

    def rejoin_randomized(self, ctx, s, me, now, counter: str) -> None:
        """Break a loop: leave the current parent and re-join by a randomized Pastry route
        (a random first hop, so the JOIN does not retrace the looping route)."""
        if not len(s):
            return
        first = first_in_run(s)
        s, me, now = s[first], me[first], now[first]
        sl = self.tree.slots
        ctx.count(counter, len(s))
        old = sl["parent"][s].astype(np.int64)
        had = old >= 0
        self.messenger.send(ctx, me[had], old[had], LEAVE, now[had], sl["group"][s[had]])
        self.lose_parent(s)
        cred = np.where(sl["member"][s], sl["my_cred"][s], sl["join_cred"][s])
        self.messenger.route(ctx, me, JOIN, now, sl["group"][s],
                             **self.tree.repair_join(s, cred),
                             origin=me, randomize=True)

    def state(self):
        return None if self.paths is None else self.paths.state()
