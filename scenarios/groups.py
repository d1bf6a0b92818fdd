"""Group sizes (Zipf-like or fixed), creators, credentials and members, per topology seed.

SPEC 5: the group of rank r has ``gsize(r) = floor(N * r**-e + 0.5)`` members (e = 1.25
in the published experiments), drawn uniformly at random without replacement, per
topology seed. Everything here is deterministic in (seed, topology index) and independent
of the number of shards, so a run's membership is the same whatever the partition.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from actors.scribe import group_table

# Tags that separate the random streams drawn from one (seed, topology) pair.
_STREAM_GROUPS = 0x6752
_STREAM_JOIN_TIMES = 0x4A54


def zipf_sizes(n_nodes: int, n_groups: int, exponent: float = 1.25) -> np.ndarray:
    """gsize(r) = floor(N r^-e + 0.5) for r = 1..G (int64, non-increasing). O(G)."""
    if n_nodes < 1 or n_groups < 1:
        raise ValueError(f"zipf_sizes: need n_nodes >= 1 and n_groups >= 1, got {n_nodes}, "
                         f"{n_groups}")
    if exponent <= 0:
        raise ValueError(f"zipf_sizes: exponent must be > 0, got {exponent}")
    r = np.arange(1, n_groups + 1, dtype=np.float64)
    sizes = np.floor(n_nodes * r ** -float(exponent) + 0.5).astype(np.int64)
    return np.minimum(sizes, n_nodes)


def group_sizes(kind: str, n_nodes: int, n_groups: int, exponent: float = 1.25,
                size: int = 11) -> np.ndarray:
    if kind == "zipf":
        return zipf_sizes(n_nodes, n_groups, exponent)
    if kind == "fixed":
        if not 1 <= size <= n_nodes:
            raise ValueError(f"group size {size} must be in 1..{n_nodes} (the number of nodes)")
        return np.full(n_groups, int(size), np.int64)
    raise ValueError(f"group kind must be 'zipf' or 'fixed', got {kind!r}")


@dataclass
class GroupPlan:
    """What a scenario does with its groups on one topology.

    sizes/ranks/creators/credentials: one entry per group (group index = rank - 1);
    members: all (group, member) pairs as two flat int32 arrays sorted by group then member;
    table: the shared group table for Scribe (``ctx.shared("groups")``).
    """

    sizes: np.ndarray
    ranks: np.ndarray
    creators: np.ndarray
    credentials: np.ndarray
    member_group: np.ndarray
    member_node: np.ndarray
    table: dict

    @property
    def n_groups(self) -> int:
        return len(self.sizes)

    def members_of(self, g: int) -> np.ndarray:
        lo, hi = np.searchsorted(self.member_group, [g, g + 1])
        return self.member_node[lo:hi]


def _members(rng: np.random.Generator, n_nodes: int, sizes: np.ndarray):
    """Uniform members without replacement per group; O(sum of sizes) except for groups
    larger than N/8, which cost one O(N) permutation each (there are few: Zipf)."""
    groups, nodes = [], []
    for g, s in enumerate(sizes.tolist()):
        if s == n_nodes:
            pick = np.arange(n_nodes, dtype=np.int64)
        else:
            pick = rng.choice(n_nodes, size=s, replace=False)
        groups.append(np.full(s, g, np.int32))
        nodes.append(np.sort(pick).astype(np.int32))
    if not groups:
        return np.zeros(0, np.int32), np.zeros(0, np.int32)
    return np.concatenate(groups), np.concatenate(nodes)


def plan_groups(scenario: str, kind: str, n_nodes: int, n_groups: int, seed: int, topo: int,
                exponent: float = 1.25, size: int = 11) -> GroupPlan:
    """Sizes, creators (uniform nodes), credential tokens and members for topology `topo`."""
    sizes = group_sizes(kind, n_nodes, n_groups, exponent, size)
    if sizes.min() < 1:
        r = int(np.argmax(sizes < 1)) + 1
        raise ValueError(f"the Zipf group of rank {r} would have 0 members with {n_nodes} "
                         f"nodes; use at most {r - 1} groups or more nodes")
    rng = np.random.default_rng([int(seed), int(topo), _STREAM_GROUPS])
    creators = rng.integers(0, n_nodes, n_groups).astype(np.int64)
    credentials = rng.integers(1, 2**62, n_groups).astype(np.int64)
    ranks = np.arange(1, n_groups + 1, dtype=np.int32)
    member_group, member_node = _members(rng, n_nodes, sizes)
    # groupId = SHA-1(name || creator name); names are unique per scenario and topology
    names = [f"{scenario}/t{topo}/g{r}" for r in ranks.tolist()]
    table = group_table(names, [f"node{c}" for c in creators.tolist()], credentials,
                        ranks=ranks, sizes=sizes.astype(np.int32))
    return GroupPlan(sizes, ranks, creators, credentials, member_group, member_node, table)


def join_times(seed: int, topo: int, n: int, start_us: int, spread_us: int) -> np.ndarray:
    """Uniform join times in [start, start + spread) for n joins (int64 us)."""
    rng = np.random.default_rng([int(seed), int(topo), _STREAM_JOIN_TIMES])
    if spread_us <= 0:
        return np.full(n, int(start_us), np.int64)
    return int(start_us) + rng.integers(0, int(spread_us), n).astype(np.int64)
