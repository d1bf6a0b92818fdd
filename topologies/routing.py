"""IP routing tables over a RouterGraph: policy routes with delay tie-break.

Route weight of an edge = policy * M + delay_us, where M is a power of two larger than the
sum of all edge delays, so one Dijkstra gives the policy-optimal route, ties broken by
delay, and the route delay is `dist mod M` (exact in float64 while the largest possible
weight stays below 2**53). Without policy weights the route is the minimum-delay route.

Two implementations with one interface:
- `DenseRoutes`: all-pairs tables (int32 us delays, int16/int32 predecessors), computed in
  row chunks with scipy.sparse.csgraph.dijkstra; O(n (E + n log n)) time, 6 bytes per pair.
- `LazyRoutes`: single-source rows on demand with an LRU cache, for maps too large for
  n x n tables; each row O(E + n log n).
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from .errors import TopologyError

DENSE_MAX_ROUTERS = 16384
_CHUNK_ROWS = 256


def route_weight_matrix(n, src, dst, delay_us, policy):
    """Symmetric CSR matrix of route weights and the multiplier M (1 without policy)."""
    delay = np.asarray(delay_us, np.float64)
    if policy is None:
        mult = 1.0
        w = delay
    else:
        mult = float(2 ** int(np.ceil(np.log2(delay.sum() + 2))))
        if (float(np.sum(policy)) + 1) * mult >= 2.0 ** 53:
            raise TopologyError("policy weights x delays exceed exact float64 range")
        w = np.asarray(policy, np.float64) * mult + delay
    rows = np.concatenate([src, dst])
    cols = np.concatenate([dst, src])
    mat = sp.csr_matrix((np.concatenate([w, w]), (rows, cols)), shape=(n, n))
    return mat, mult


def _delay_from_weight(dist, mult):
    """Route delay (us, int64) from a combined weight; -1 where unreachable."""
    out = np.full(dist.shape, -1, np.int64)
    ok = np.isfinite(dist)
    if mult == 1.0:
        out[ok] = np.rint(dist[ok]).astype(np.int64)
    else:
        out[ok] = np.fmod(dist[ok], mult).astype(np.int64)
    return out


class DenseRoutes:
    """All-pairs route delays and predecessors; memory 6 bytes per router pair (n < 32k)."""
    kind = "dense"

    def __init__(self, n, src, dst, delay_us, policy, dist=None, pred=None):
        self.n = int(n)
        if dist is None:
            if self.n > DENSE_MAX_ROUTERS:
                raise TopologyError(f"{self.n} routers is too many for all-pairs tables "
                                    f"(limit {DENSE_MAX_ROUTERS})")
            dist, pred = self._compute(src, dst, delay_us, policy)
        self.dist = dist
        self.pred = pred

    def _compute(self, src, dst, delay_us, policy):
        mat, mult = route_weight_matrix(self.n, src, dst, delay_us, policy)
        dist = np.empty((self.n, self.n), np.int32)
        pred = np.empty((self.n, self.n), np.int16 if self.n < 32767 else np.int32)
        for lo in range(0, self.n, _CHUNK_ROWS):
            rows = np.arange(lo, min(lo + _CHUNK_ROWS, self.n))
            d, p = dijkstra(mat, directed=True, indices=rows, return_predecessors=True)
            dd = _delay_from_weight(d, mult)
            if dd.min() < 0:
                raise TopologyError("the router graph is not connected")
            if dd.max() >= 2 ** 31:
                raise TopologyError("route delay exceeds int32 microseconds")
            dist[rows] = dd
            pred[rows] = p
        return dist, pred

    def dist_us(self, a, b):
        return self.dist[a, b].astype(np.int64)

    def pred_row(self, s):
        return self.pred[s]

    def dist_row(self, s):
        return self.dist[s]


class LazyRoutes:
    """Single-source route rows on demand, LRU-cached (`cache_rows` rows kept)."""
    kind = "lazy"

    def __init__(self, n, src, dst, delay_us, policy, cache_rows=512):
        self.n = int(n)
        self.mat, self.mult = route_weight_matrix(self.n, src, dst, delay_us, policy)
        self.cache_rows = int(cache_rows)
        self._cache: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def row(self, s):
        """(delay_us int64[n], pred int32[n]) of source router s; O(E + n log n) on a miss."""
        s = int(s)
        hit = self._cache.get(s)
        if hit is not None:
            self._cache.move_to_end(s)
            return hit
        d, p = dijkstra(self.mat, directed=True, indices=s, return_predecessors=True)
        dd = _delay_from_weight(d, self.mult)
        if dd.min() < 0:
            raise TopologyError("the router graph is not connected")
        hit = (dd, p.astype(np.int32))
        self._cache[s] = hit
        if len(self._cache) > self.cache_rows:
            self._cache.popitem(last=False)
        return hit

    def dist_us(self, a, b):
        a = np.asarray(a, np.int64)
        b = np.asarray(b, np.int64)
        a, b = np.broadcast_arrays(a, b)
        out = np.empty(a.shape, np.int64)
        fa, fb, fo = a.ravel(), b.ravel(), out.reshape(-1)
        order = np.argsort(fa, kind="stable")
        uniq, start = np.unique(fa[order], return_index=True)
        bounds = np.append(start, len(order))
        for i, s in enumerate(uniq):
            sel = order[bounds[i]:bounds[i + 1]]
            fo[sel] = self.row(s)[0][fb[sel]]
        return out

    def pred_row(self, s):
        return self.row(s)[1]

    def dist_row(self, s):
        return self.row(s)[0]


class MatrixRoutes:
    """A measured site-to-site latency matrix (no paths): int32 us."""
    kind = "matrix"

    def __init__(self, dist):
        self.dist = np.asarray(dist, np.int32)
        self.n = self.dist.shape[0]
        self.pred = None

    def dist_us(self, a, b):
        return self.dist[a, b].astype(np.int64)

    def dist_row(self, s):
        return self.dist[s]

    def pred_row(self, s):
        raise TopologyError("this topology is a latency matrix: it has no router paths")
