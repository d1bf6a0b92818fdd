"""Per-node random streams that do not depend on how nodes are sharded.

Draw j of node i is a pure function of (seed, i, j): a SplitMix64 finaliser of a counter
(the construction of counter-based generators such as Philox, in its simplest form), so a
node's stream is the same whichever shard hosts it and however its draws are batched.
Compiled (numba, cached): handlers draw a few numbers per call, where a numpy expression's
dozen calls cost more than the arithmetic.
"""

from __future__ import annotations

import numba
import numpy as np

_MASK = 0xFFFFFFFFFFFFFFFF


@numba.njit(cache=True)
def _splitmix64(x):
    """The SplitMix64 output function on a uint64 (wrapping arithmetic)."""
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True)
def _uniform(seed, node, draw):
    """Uniform float64 in [0, 1): draw `draw` of node `node` (uint64 seed)."""
    key = _splitmix64(seed ^ _splitmix64(np.uint64(node)))
    z = _splitmix64(key + np.uint64(draw) * np.uint64(0x9E3779B97F4A7C15))
    return np.float64(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(cache=True)
def node_draw(seed, node, draw):
    """Draw ``draw`` of node ``node``'s stream (uint64 seed), for compiled handlers that
    draw inside their own call (``ShardContext.rng_state``: the seed and the counters)."""
    return _uniform(seed, np.int64(node), np.int64(draw))   # (one compile of _uniform)


@numba.njit(cache=True)
def _uniforms(seed, nodes, draws):
    out = np.empty(len(nodes), np.float64)
    for i in range(len(nodes)):
        out[i] = _uniform(seed, nodes[i], draws[i])
    return out


@numba.njit(cache=True)
def _next_draws(seed, nodes, local_idx, counters):
    out = np.empty(len(nodes), np.float64)
    for i in range(len(nodes)):
        li = local_idx[i]
        out[i] = _uniform(seed, nodes[i], counters[li])
        counters[li] += 1
    return out


def node_uniform(seed: int, nodes, draws) -> np.ndarray:
    """Uniform float64 in [0, 1) for (seed, node, draw number); vectorized, O(n)."""
    nodes = np.ascontiguousarray(nodes, np.int64).ravel()
    draws = np.broadcast_to(np.asarray(draws, np.int64), nodes.shape)
    return _uniforms(np.uint64(int(seed) & _MASK), nodes, np.ascontiguousarray(draws))


def next_draws(seed: int, nodes, local_idx, counters) -> np.ndarray:
    """Each node's next draw in turn (a node listed twice gets its next two), advancing
    its counter ``counters[local_idx[i]]`` in place: ``node_uniform(seed, nodes,
    counters[local_idx] + rank_within(local_idx))`` and the counters' increment. O(n)."""
    return _next_draws(np.uint64(int(seed) & _MASK), np.ascontiguousarray(nodes, np.int64),
                       np.ascontiguousarray(local_idx), counters)
