"""What a shard reports at the end of a round (its *head*), in a form that travels as raw
bytes and joins by concatenation.

A head is three byte strings: one fixed record per shard (HEAD_DTYPE: where it stands and
what it did), the earliest arrival it pushed to each peer for after the round's limit
(SENT: peer, time), and each batch it pushed for before the limit (PUSHED: peer, earliest,
latest arrival; see `bound_left`). The heads of many shards are the same three strings
concatenated, so a shard relaying a round (ShardActor.relay_round) joins its subtree's
heads in O(children) and the driver reads every shard's at once with numpy: its work per
round does not grow with the number of shards in Python. Raw bytes rather than numpy
arrays because Ray passes bytes without pickle's out-of-band buffers: as an argument a numpy
array costs the driver more CPU per call, and as a result a bytes head costs no more than a
stats dict or a bare int (benchmarks/bench_round_call.py measures each).
"""

from __future__ import annotations

import numpy as np

HEAD_DTYPE = np.dtype([
    ("shard", np.int64),
    ("next", np.int64),          # the shard's next event once the round is over
    ("done_until", np.int64),    # the engine's end of processed time
    ("reached", np.int64),       # the grid point before which every cell is processed
    ("left", np.int64),          # 1: the shard left the round before its limit
    ("events", np.int64),
    ("python_events", np.int64),  # of those, in passes the Python loop dispatched
    ("windows", np.int64),
    ("promises", np.int64),      # bare promises pushed
    ("wants", np.int64),         # promises asked for
    ("busy_s", np.float64),      # wall time in cells
    ("cpu_s", np.float64),       # that thread's CPU time
    ("wait_s", np.float64),      # waiting for peers' promises and for them to take pushes
])
# the per-shard times a phase sums (per shard) from its heads
PER_SHARD_TIMES = ("busy_s", "cpu_s", "wait_s")
SENT_WIDTH = 2      # (peer, earliest arrival at or after the limit)
PUSHED_WIDTH = 3    # (peer, earliest, latest arrival before the limit)


def head(shard: int, next_event: int, stats: dict) -> tuple[bytes, bytes, bytes]:
    """One shard's head from its round's `stats` (ShardActor._round): the fixed record,
    `stats["sent_min"]` ({peer: time}) and `stats["pushed"]` ([(peer, first, last)])."""
    rec = np.zeros(1, HEAD_DTYPE)
    rec["shard"] = shard
    rec["next"] = next_event
    rec["left"] = int(stats["left"])
    for key in ("done_until", "reached", "events", "python_events", "windows", "promises",
                "wants", "busy_s", "cpu_s", "wait_s"):
        rec[key] = stats[key]
    sent = np.array(list(stats["sent_min"].items()), np.int64).reshape(-1, SENT_WIDTH)
    pushed = np.array(stats["pushed"], np.int64).reshape(-1, PUSHED_WIDTH)
    return rec.tobytes(), sent.tobytes(), pushed.tobytes()


def join(heads) -> tuple[bytes, bytes, bytes]:
    """The heads of several shards (or subtrees) as one. O(total bytes)."""
    fixed, sent, pushed = zip(*heads, strict=True)
    return b"".join(fixed), b"".join(sent), b"".join(pushed)


def read(joined) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(records of HEAD_DTYPE, int64[n, 2] sent, int64[m, 3] pushed) of joined heads,
    read-only views of the bytes."""
    fixed, sent, pushed = joined
    return (np.frombuffer(fixed, HEAD_DTYPE),
            np.frombuffer(sent, np.int64).reshape(-1, SENT_WIDTH),
            np.frombuffer(pushed, np.int64).reshape(-1, PUSHED_WIDTH))


def count(joined) -> int:
    """How many shards' heads `joined` holds. O(1)."""
    return len(joined[0]) // HEAD_DTYPE.itemsize


class RoundTally:
    """What the driver keeps of a phase's rounds, from each round's joined heads: every
    shard's next event (``next_at``, updated in place) and the phase's totals. One `add` per
    round, numpy over the round's shards (no loop over them in Python)."""

    def __init__(self, next_at: np.ndarray):
        self.next_at = next_at
        self.per_shard = {key: np.zeros(len(next_at)) for key in PER_SHARD_TIMES}
        self.done_until = 0
        self.events = self.python_events = self.promises = self.wants = self.windows = 0
        self.early = self.bounded = 0      # rounds some shard left early; shards bounded

    def add(self, joined) -> bool:
        """Take one round's heads: each shard's next event, lowered by the arrivals pushed
        to it for after the round (still in its inbox) and, when some shard left early, by
        `bound_left`; the totals. True if some shard left the round early. O(shards in the
        round + batches they pushed)."""
        fixed, sent, pushed = read(joined)
        nxt = self.next_at
        ks = fixed["shard"]
        nxt[ks] = fixed["next"]
        if len(fixed):
            self.done_until = max(self.done_until, int(fixed["done_until"].max()))
            self.windows += int(fixed["windows"].max())
        self.events += int(fixed["events"].sum())
        self.python_events += int(fixed["python_events"].sum())
        self.promises += int(fixed["promises"].sum())
        self.wants += int(fixed["wants"].sum())
        for key, total in self.per_shard.items():
            total[ks] += fixed[key]
        np.minimum.at(nxt, sent[:, 0], sent[:, 1])
        left = bool(fixed["left"].any())
        if left:
            self.early += 1
            self.bounded += bound_left(nxt, fixed, pushed)
        return left


def bound_left(next_at: np.ndarray, fixed: np.ndarray, pushed: np.ndarray) -> int:
    """After a round that ended early, lower ``next_at`` (per shard, in place) for the
    shards that left: one that left before `limit` may not have run batches pushed to it
    for before `limit`, which wait in its inbox. None of them is due before the grid point
    it stopped at (``reached``: its peers' promises kept it from running past anything
    still on its way), so its next event is at least ``max(earliest, reached)`` of each
    pushed batch whose latest arrival is at or after ``reached``. `fixed` and `pushed` are
    the round's heads (`read`). A lower bound is all the rounds need (it only makes the next
    one more careful) and costs no call to the shard, which reports its true next event at
    the end of its next round. Returns how many shards it lowered.
    O(K + batches pushed before `limit`), in numpy."""
    gone = fixed[fixed["left"] != 0]
    if not len(gone) or not len(pushed):
        return 0
    left = np.zeros(len(next_at), bool)
    stop = np.zeros(len(next_at), np.int64)
    left[gone["shard"]] = True
    stop[gone["shard"]] = gone["reached"]
    dst, first, last = pushed[:, 0], pushed[:, 1], pushed[:, 2]
    at = np.maximum(first, stop[dst])
    lower = left[dst] & (last >= stop[dst]) & (at < next_at[dst])
    if not lower.any():
        return 0
    np.minimum.at(next_at, dst[lower], at[lower])
    return len(np.unique(dst[lower]))
