"""Oracle bootstrap (exact PNS) and vectorized routing on a few thousand nodes."""

import math

import numpy as np
import pytest

from actors.pastry import ids as I
from actors.pastry.oracle import oracle_state
from actors.pastry.routing import next_hop
from actors.pastry.state import PastryState, table_rows
from actors.pastry.synthetic import synthetic_network

N = 3000


@pytest.fixture(scope="module")
def net():
    return synthetic_network(N, 300, seed=4)


@pytest.fixture(scope="module")
def state(net):
    return oracle_state(np.arange(N), net["node_ids_hi"], net["node_ids_lo"], net["host_router"],
                        net["router_dist_us"], net["lan_us"])


def test_table_rows_and_memory():
    assert table_rows(1, 4) == 2
    assert table_rows(16, 4) == 3
    assert table_rows(17, 4) == 4
    assert table_rows(100_000, 4) == 7
    assert table_rows(10**9, 1) == 32
    s = PastryState.empty(1000, 100_000)
    assert s.nbytes() * 100 < 2 * 2**30  # < 2 GB per 100k nodes
    with pytest.raises(ValueError, match="leaf.set"):
        PastryState.empty(10, 100, l=15)


def test_oracle_entries_are_closest_with_right_prefix(net, state):
    hi, lo = net["node_ids_hi"], net["node_ids_lo"]
    hr, d = net["host_router"], net["router_dist_us"]
    rng = np.random.default_rng(1)
    for x in rng.integers(0, N, 25):
        p = I.shared_prefix_len(hi[x], lo[x], hi, lo)
        for r in range(state.rows):
            dg = I.digit(hi, lo, r)
            mine = int(I.digit(hi[x], lo[x], r))
            for col in range(16):
                cand = np.flatnonzero((p >= r) & (dg == col))
                want = -1
                if col != mine and len(cand):
                    want = cand[np.lexsort((cand, d[hr[x], hr[cand]]))[0]]
                assert state.rt[x, r, col] == want


def test_oracle_leaf_and_neighbourhood_sets(net, state):
    hi, lo = net["node_ids_hi"], net["node_ids_lo"]
    hr, d = net["host_router"], net["router_dist_us"]
    vals = I.to_int(hi, lo)
    order = sorted(range(N), key=lambda i: vals[i])
    pos = {v: k for k, v in enumerate(order)}
    for x in (0, 17, 2999):
        p = pos[x]
        assert list(state.leaf[x, :8]) == [order[(p - j) % N] for j in range(1, 9)]
        assert list(state.leaf[x, 8:]) == [order[(p + j) % N] for j in range(1, 9)]
        others = np.array([y for y in range(N) if y != x])
        want = others[np.lexsort((others, d[hr[x], hr[others]]))][:32]
        assert list(state.nbr[x]) == list(want)


def test_slices_match_whole(net, state):
    nodes = np.arange(N)[1::2]
    part = oracle_state(nodes, net["node_ids_hi"], net["node_ids_lo"], net["host_router"],
                        net["router_dist_us"], net["lan_us"])
    assert (part.rt == state.rt[nodes]).all()
    assert (part.leaf == state.leaf[nodes]).all()
    assert (part.nbr == state.nbr[nodes]).all()


def route_all(state, hi, lo, start, kh, kl, max_hops=40, exclude=None):
    cur = np.asarray(start, np.int64).copy()
    hops = np.zeros(len(cur), np.int64)
    final = np.full(len(cur), -1, np.int64)
    active = np.arange(len(cur))
    for _ in range(max_hops):
        ex = None if exclude is None else exclude[active]
        nx, _rule = next_hop(state, cur[active], cur[active], kh[active], kl[active], hi, lo,
                             exclude=ex)
        stop = nx < 0
        final[active[stop]] = cur[active[stop]]
        active = active[~stop]
        cur[active] = nx[~stop]
        hops[active] += 1
        if not len(active):
            return final, hops
    raise AssertionError("routing loop: routes did not finish")


def test_every_key_reaches_closest_node(net, state):
    hi, lo = net["node_ids_hi"], net["node_ids_lo"]
    rng = np.random.default_rng(2)
    k = 20_000
    kh = rng.integers(0, 2**64, k, dtype=np.uint64)
    kl = rng.integers(0, 2**64, k, dtype=np.uint64)
    # plus keys equal to node ids and next to them
    kh = np.r_[kh, hi[:500], hi[:500]]
    kl = np.r_[kl, lo[:500], lo[:500] + np.uint64(1)]
    start = rng.integers(0, N, len(kh))
    final, hops = route_all(state, hi, lo, start, kh, kl)
    order = I.sorted_order(hi, lo)
    root = I.closest_node(hi[order], lo[order], order, kh, kl)
    assert (final == root).all()
    assert hops.mean() < math.ceil(math.log(N, 16))
    assert hops.max() <= 2 * math.ceil(math.log(N, 16)) + 1


def test_lookup_of_own_id_reaches_the_neighbour(net, state):
    """Routing as if the origin were absent (a node's LEAF_LOOKUP of its own id) ends at
    the live node closest to its id among the others -- its leaf-set neighbour -- from any
    start; without the exclusion the same routes end at the origin itself."""
    hi, lo = net["node_ids_hi"], net["node_ids_lo"]
    rng = np.random.default_rng(5)
    x = rng.choice(N, 400, replace=False).astype(np.int64)
    start = rng.integers(0, N, len(x))
    start = np.where(start == x, (start + 1) % N, start)
    final, hops = route_all(state, hi, lo, start, hi[x], lo[x], exclude=x)
    order = I.sorted_order(hi, lo)
    for i, node in enumerate(x):    # closest among all nodes but x
        rest = order[order != node]
        want = I.closest_node(hi[rest], lo[rest], rest, hi[x[i:i + 1]], lo[x[i:i + 1]])[0]
        assert final[i] == want
    assert (final != x).all()
    plain, _ = route_all(state, hi, lo, start, hi[x], lo[x])
    assert (plain == x).all()


def test_rare_case_and_empty_rows(net, state):
    hi, lo = net["node_ids_hi"], net["node_ids_lo"]
    st = PastryState(rt=state.rt.copy(), leaf=state.leaf.copy(), nbr=state.nbr.copy(), b=4)
    rng = np.random.default_rng(3)
    st.rt[rng.random(st.rt.shape) < 0.3] = -1  # holes: the rare case must fill in
    kh = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    kl = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    start = rng.integers(0, N, 5000)
    _, rule = next_hop(st, start, start, kh, kl, hi, lo)
    assert (rule == 2).any()
    final, _ = route_all(st, hi, lo, start, kh, kl)
    order = I.sorted_order(hi, lo)
    assert (final == I.closest_node(hi[order], lo[order], order, kh, kl)).all()


def test_tiny_overlays_route_correctly():
    for n in (1, 2, 3, 9, 17):
        net = synthetic_network(n, 5, seed=n)
        hi, lo = net["node_ids_hi"], net["node_ids_lo"]
        st = oracle_state(np.arange(n), hi, lo, net["host_router"], net["router_dist_us"], 1000)
        rng = np.random.default_rng(n)
        kh = rng.integers(0, 2**64, 300, dtype=np.uint64)
        kl = rng.integers(0, 2**64, 300, dtype=np.uint64)
        final, _ = route_all(st, hi, lo, rng.integers(0, n, 300), kh, kl)
        order = I.sorted_order(hi, lo)
        assert (final == I.closest_node(hi[order], lo[order], order, kh, kl)).all()


def test_oracle_rejects_bad_input(net):
    with pytest.raises(ValueError, match="square"):
        oracle_state([0], net["node_ids_hi"], net["node_ids_lo"], net["host_router"],
                     np.zeros((3, 4), np.int32))
    with pytest.raises(ValueError, match="LAN"):
        oracle_state([0], net["node_ids_hi"], net["node_ids_lo"], net["host_router"],
                     net["router_dist_us"], np.arange(N))


@pytest.mark.parametrize("n", [2, 3, 5, 9, 17, 40])
def test_tiny_rings_route_to_closest_with_short_sides(n):
    """The half-ring side rule leaves sides short on tiny rings; routing must still reach
    the numerically closest node from every node."""
    from actors.pastry.quality import route_paths
    from actors.pastry.synthetic import synthetic_network
    net = synthetic_network(n, 7, seed=n)
    hi, lo = net["node_ids_hi"], net["node_ids_lo"]
    st = oracle_state(np.arange(n), hi, lo, net["host_router"], net["router_dist_us"],
                      net["lan_us"])
    rng = np.random.default_rng(n)
    k = 400
    kh = rng.integers(0, 2**64, k, dtype=np.uint64)
    kl = rng.integers(0, 2**64, k, dtype=np.uint64)
    start = rng.integers(0, n, k)
    final, _, _ = route_paths(st, hi, lo, start, kh, kl)
    o = I.sorted_order(hi, lo)
    assert (final == I.closest_node(hi[o], lo[o], o, kh, kl)).all()
    # sides never share a node; with n - 1 <= l/2 each half ring fits its side: all listed
    for row in st.leaf:
        got = row[row >= 0]
        assert len(got) == len(set(got.tolist()))
        if n - 1 <= 8:
            assert len(got) == n - 1


def test_leaf_merge_keeps_a_side_short_rather_than_wrapping():
    """A node that knows only larger ids must not put far larger ids on its smaller side."""
    from actors.pastry.kernels import merge_leaf_sets
    from actors.pastry.synthetic import synthetic_network
    net = synthetic_network(400, 7, seed=4)
    hi, lo = net["node_ids_hi"], net["node_ids_lo"]
    o = I.sorted_order(hi, lo)
    me = o[100]
    cand = np.r_[o[95:100], o[101:140]][None, :]        # 5 smaller, 39 larger
    members = np.full((1, 16), -1, np.int32)             # a node with an empty leaf set
    changed, added = merge_leaf_sets(members, np.zeros((1, 16), np.int64),
                                     np.zeros(1, np.int64), cand.astype(np.int64),
                                     np.ones(1, np.int64), np.array([me], np.int64), hi, lo,
                                     8, np.full((1, 0), -1, np.int32))
    out = members
    assert changed[0] and np.array_equal(added, members)
    assert out[0, :5].tolist() == o[99:94:-1].tolist() and (out[0, 5:8] == -1).all()
    assert out[0, 8:].tolist() == o[101:109].tolist()
