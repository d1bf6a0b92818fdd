"""Per-node random streams that do not depend on how nodes are sharded.

Draw j of node i is a pure function of (seed, i, j): a SplitMix64 finaliser of a counter
(the construction of counter-based generators such as Philox, in its simplest form), so a
node's stream is the same whichever shard hosts it and however its draws are batched.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The SplitMix64 output function on uint64 (wrapping arithmetic)."""
    x = np.asarray(x, np.uint64)
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def node_uniform(seed: int, nodes, draws) -> np.ndarray:
    """Uniform float64 in [0, 1) for (seed, node, draw number); vectorized, O(n)."""
    nodes = np.asarray(nodes, np.uint64)
    draws = np.asarray(draws, np.uint64)
    with np.errstate(over="ignore"):
        key = splitmix64(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) ^ splitmix64(nodes))
        z = splitmix64(key + draws * _GOLDEN)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
