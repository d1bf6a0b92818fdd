"""The scenario's group table: group index -> 128-bit groupId (hi, lo) and credential token.

groupId = SHA-1(name || creator name) truncated to 128 bits (SPEC 3). The table is shared
read-only with every shard (``ctx.shared("groups")``); Scribe reads ids and tokens from it.
"""

from __future__ import annotations

import numpy as np

from actors.pastry.ids import sha1_id as sha1_id128  # (hi, lo) of the first 128 bits


def group_table(names, creators, credentials, ranks=None, sizes=None) -> dict:
    """Build the shared group table. O(G) hashes.

    names: group names (str); creators: creator names (str, e.g. the creator's node
    address) or node indices; credentials: int64 tokens (>= 0) that form each group's ACL.
    Returns a dict of equal-length arrays: ``id_hi``/``id_lo`` (uint64), ``credential``
    (int64), ``rank`` and ``size`` (int32, -1 when unknown) and ``id_hex`` (str objects).
    """
    names = list(names)
    creators = list(creators)
    credentials = np.asarray(credentials, dtype=np.int64)
    n = len(names)
    if len(creators) != n or credentials.shape != (n,):
        raise ValueError(
            f"group_table: names ({n}), creators ({len(creators)}) and credentials "
            f"({credentials.shape}) must have the same length")
    if n and credentials.min() < 0:
        raise ValueError("group_table: credential tokens must be >= 0 (-1 means 'unknown')")
    if len(set(names)) != n:
        raise ValueError("group_table: group names must be unique")
    hi = np.empty(n, dtype=np.uint64)
    lo = np.empty(n, dtype=np.uint64)
    hexes = np.empty(n, dtype=object)
    for g, (name, creator) in enumerate(zip(names, creators)):
        h, l = sha1_id128(f"{name}{creator}")  # SHA-1(name || creator name)
        hi[g], lo[g] = h, l
        hexes[g] = f"{h:016x}{l:016x}"
    def _opt(col, what):
        if col is None:
            return np.full(n, -1, dtype=np.int32)
        col = np.asarray(col, dtype=np.int32)
        if col.shape != (n,):
            raise ValueError(f"group_table: {what} must have one entry per group")
        return col
    return {"id_hi": hi, "id_lo": lo, "credential": credentials, "id_hex": hexes,
            "rank": _opt(ranks, "ranks"), "size": _opt(sizes, "sizes")}
