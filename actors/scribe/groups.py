"""Groups: the scenario's group table (ids, credentials) and what Scribe does with it.

groupId = SHA-1(name || creator name) truncated to 128 bits (SPEC 3), the same bits as a
Pastry node id (``actors.common_api.key_of``). The table is shared read-only with every
shard (``ctx.shared("groups")``); ``GroupDirectory`` is Scribe's view of it: keys, the
credential check, and the logs of group creation and refusals.
"""

from __future__ import annotations

import numpy as np

from actors.common_api import key_of


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
    for g, (name, creator) in enumerate(zip(names, creators, strict=True)):
        h, l = key_of(f"{name}{creator}")  # SHA-1(name || creator name)
        hi[g], lo[g] = h, l
        hexes[g] = f"{h:016x}{l:016x}"
    return {"id_hi": hi, "id_lo": lo, "credential": credentials, "id_hex": hexes,
            "rank": _optional_column(ranks, n, "ranks"),
            "size": _optional_column(sizes, n, "sizes")}


def _optional_column(col, n: int, what: str) -> np.ndarray:
    if col is None:
        return np.full(n, -1, dtype=np.int32)
    col = np.asarray(col, dtype=np.int32)
    if col.shape != (n,):
        raise ValueError(f"group_table: {what} must have one entry per group")
    return col


def wrong_credential(acl, credential) -> np.ndarray:
    """Rows whose credential does not match a known ACL token (-1: the ACL is unknown
    here, so nothing can be checked)."""
    return (acl >= 0) & (credential != acl)


class GroupDirectory:
    """Scribe's read-only view of the shared group table."""

    def __init__(self, table: dict):
        self.table = table

    def __len__(self) -> int:
        return len(self.table["id_hi"])

    def key(self, group):
        """(key_hi, key_lo) of each group index: where the group's RP is."""
        return self.table["id_hi"][group], self.table["id_lo"][group]

    def log_created(self, ctx, group, rp, creator) -> None:
        """One ``group`` log row per group created at its RP."""
        if len(group):
            ctx.log("group", group=group.astype(np.int32),
                    rank=self.table["rank"][group].astype(np.int32),
                    size=self.table["size"][group].astype(np.int32),
                    rp=rp.astype(np.int32), creator=creator.astype(np.int32),
                    id_hex=np.asarray(self.table["id_hex"][group], dtype=object))

    @staticmethod
    def refuse(ctx, group, node, op: str, time) -> None:
        """Log and count the requests refused (bad credential, duplicate create, ...)."""
        if len(group):
            ctx.log("refused", group=np.asarray(group, np.int32), node=np.asarray(node, np.int32),
                    op=op, time=np.asarray(time, np.int64))
            ctx.count(f"scribe_refused_{op}", len(group))
