"""The numba kernels compute exactly what the numpy functions they replace computed:
random states and candidate rows (duplicates, -1 pads, dead ids, the node itself, short
leaf sets, empty slots), compared value for value."""

import numpy as np
import pytest

from actors.pastry import kernels
from actors.pastry.merge import (
    group_rows,
    group_rows_numpy,
    insert_table,
    select_leaves,
    select_nearest,
)
from actors.pastry.oracle import oracle_state
from actors.pastry.routing import next_hop, next_hop_numpy
from actors.pastry.synthetic import host_latency, synthetic_network

N = 400


@pytest.fixture(scope="module")
def net():
    return synthetic_network(N, 30, 7, span_us=50_000)


@pytest.fixture(scope="module")
def holey_state(net):
    """The oracle's state with a third of the entries knocked out (short leaf sides too)."""
    st = oracle_state(np.arange(N), net["node_ids_hi"], net["node_ids_lo"], net["host_router"],
                      net["router_dist_us"], net["lan_us"], n_nodes=N)
    rng = np.random.default_rng(3)
    st.rt[rng.random(st.rt.shape) < 0.3] = -1
    cut = rng.random(N) < 0.2
    st.leaf[cut, 5:8] = -1
    st.leaf[cut, 13:] = -1
    st.nbr[rng.random(st.nbr.shape) < 0.3] = -1
    return st


def _cand(rng, rows, cols, me):
    c = rng.integers(-1, N, (rows, cols))
    c[:, 0] = me                                  # the node itself
    c[:, 1] = c[:, 2]                             # a duplicate
    return c


def test_next_hop_kernel_equals_numpy(net, holey_state):
    rng = np.random.default_rng(1)
    nodes = rng.integers(0, N, 3000)
    kh = rng.integers(0, 2**64, 3000, dtype=np.uint64)
    kl = rng.integers(0, 2**64, 3000, dtype=np.uint64)
    kh[:500] = net["node_ids_hi"][nodes[:500]]    # keys that are node ids (lookups)
    kl[:500] = net["node_ids_lo"][nodes[:500]]
    ex = np.where(rng.random(3000) < 0.3, rng.integers(0, N, 3000), -1)
    for exclude in (None, ex):
        got = next_hop(holey_state, nodes, nodes, kh, kl, net["node_ids_hi"],
                       net["node_ids_lo"], exclude=exclude)
        ref = next_hop_numpy(holey_state, nodes, nodes, kh, kl, net["node_ids_hi"],
                             net["node_ids_lo"], exclude=exclude)
        assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])
        assert set(np.unique(got[1]).tolist()) == {0, 1, 2}  # every rule exercised


def test_insert_table_kernel_equals_numpy(net, holey_state):
    rng = np.random.default_rng(2)
    li = rng.integers(0, N, 300)
    li[:50] = li[50:100]                          # several rows for one node
    cand = _cand(rng, 300, 12, li)
    dead = np.full((300, 4), -1, np.int32)
    a, b = holey_state.rt.copy(), holey_state.rt.copy()
    lat = RouterLat(net)
    p_ref = insert_table(a, li, li, cand, net["node_ids_hi"], net["node_ids_lo"], 4, lat)
    p_got = kernels.insert_table(b, li.astype(np.int64), li.astype(np.int64), cand,
                                 net["node_ids_hi"], net["node_ids_lo"], 4, net["host_router"],
                                 net["router_dist_us"], net["lan_us"], dead)
    assert p_got == p_ref > 0 and np.array_equal(a, b) and (a != holey_state.rt).any()


def test_leaf_and_neighbour_selection_kernels_equal_numpy(net, holey_state):
    rng = np.random.default_rng(4)
    me = rng.integers(0, N, 500).astype(np.int64)
    cand = _cand(rng, 500, 40, me)
    dead = np.where(rng.random((500, 8)) < 0.3, cand[:, 3:11], -1).astype(np.int32)
    ref = select_leaves(me, cand, net["node_ids_hi"], net["node_ids_lo"], 8, exclude=dead)
    got = kernels.select_leaves(me, cand, net["node_ids_hi"], net["node_ids_lo"], 8, dead)
    assert np.array_equal(got, ref)
    ref = select_nearest(me, cand, 16, RouterLat(net), exclude=dead)
    got = kernels.select_nearest(me, cand, 16, dead, net["host_router"],
                                 net["router_dist_us"], net["lan_us"])
    assert np.array_equal(got, ref)


def test_group_rows_kernel_equals_numpy():
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 50, 400)
    cand = rng.integers(-1, 1000, (400, 7))
    t = rng.integers(0, 10**9, 400)
    for tt in (t, None):
        got, ref = group_rows(keys, cand, tt), group_rows_numpy(keys, cand, tt)
        assert all(np.array_equal(x, y) for x, y in zip(got[:2], ref[:2], strict=True))
        assert (tt is None and got[2] is None) or np.array_equal(got[2], ref[2])


class RouterLat:
    """The engine's latency rule (0 for a node to itself) on a synthetic network."""

    def __init__(self, net):
        self.net = net

    def __call__(self, a, b):
        a, b = np.asarray(a), np.asarray(b)
        return np.where(a == b, 0, host_latency(self.net, a, b))


def test_nearest_column_is_argmin_with_first_of_equals():
    """The oracle's per-digit nearest router: argmin over the gathered submatrix, ties to
    the first column (the smallest host), without building the submatrix."""
    from actors.pastry.kernels import nearest_column
    rng = np.random.default_rng(5)
    dist = rng.integers(0, 6, (40, 40)).astype(np.int32)    # many ties
    for _ in range(50):
        rows = rng.choice(40, int(rng.integers(1, 40)), replace=False).astype(np.int64)
        cols = rng.choice(40, int(rng.integers(1, 40)), replace=False).astype(np.int64)
        expect = np.argmin(dist[np.ix_(rows, cols)], axis=1)
        assert np.array_equal(nearest_column(dist, rows, cols), expect)
