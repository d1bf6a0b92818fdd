"""The numba kernels compute exactly what their numpy references (tests/reference_pastry.py)
compute: random states and candidate rows (duplicates, -1 pads, dead ids, the node itself,
short leaf sets, empty slots), compared value for value."""

import numba
import numpy as np
import pytest

import reference_pastry as ref_pastry
from actors.pastry import kernels
from actors.pastry.oracle import oracle_state
from actors.pastry.routing import next_hop
from actors.pastry.synthetic import synthetic_network
from emulator.kernels import (
    INSERTION_MAX,
    host_delay,
    prefetch,
    prefetch_delay,
    router_latency,
    stable_order,
    unique_first,
)
from reference_pastry import group_rows_kernel as group_rows

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
        ref = ref_pastry.next_hop(holey_state, nodes, nodes, kh, kl, net["node_ids_hi"],
                                  net["node_ids_lo"], exclude=exclude)
        assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])
        assert set(np.unique(got[1]).tolist()) == {0, 1, 2}  # every rule exercised


def test_insert_table_kernel_equals_numpy(net, holey_state):
    rng = np.random.default_rng(2)
    li = rng.integers(0, N, 300)
    li[:50] = li[50:100]                          # several rows for one node
    cand = _cand(rng, 300, 12, li)
    no_failed = np.full((N, 4), -1, np.int32)
    a, b = holey_state.rt.copy(), holey_state.rt.copy()
    lat = RouterLat(net)
    p_ref = ref_pastry.insert_table(a, li, li, cand, net["node_ids_hi"], net["node_ids_lo"], 4, lat)
    p_got = kernels.insert_table(b, li.astype(np.int64), np.arange(N, dtype=np.int64), cand,
                                 net["node_ids_hi"], net["node_ids_lo"], 4, net["host_router"],
                                 net["router_dist_us"], net["lan_us"], no_failed)
    assert p_got == p_ref > 0 and np.array_equal(a, b) and (a != holey_state.rt).any()


def test_leaf_and_neighbour_merges_into_empty_sets_equal_numpy_selection(net):
    """Merged into empty sets (a neighbourhood set's row not known yet), candidates give
    the leaf and neighbourhood sets that selecting from them gives: duplicates, -1, the
    node itself and its failed ids left out."""
    rng = np.random.default_rng(4)
    me = rng.integers(0, N, 500).astype(np.int64)
    cand = _cand(rng, 500, 40, me)
    dead = np.where(rng.random((500, 8)) < 0.3, cand[:, 3:11], -1).astype(np.int32)
    rows = np.arange(500, dtype=np.int64)       # node i of these 500 has global id me[i]
    ref = ref_pastry.select_leaves(me, cand, net["node_ids_hi"], net["node_ids_lo"], 8,
                                   exclude=dead)
    leaves = np.full((500, 16), -1, np.int32)
    kernels.merge_leaf_sets(leaves, np.zeros((500, 16), np.int64), rows, cand,
                            np.ones(500, np.int64), me, net["node_ids_hi"], net["node_ids_lo"],
                            8, dead)
    assert np.array_equal(leaves, ref)
    ref = ref_pastry.select_nearest(me, cand, 16, RouterLat(net), exclude=dead)
    nbrs = np.full((500, 16), -1, np.int32)
    kernels.merge_nearest(nbrs, np.full((500, 16), -1, np.int64), np.zeros(500, np.bool_),
                          rows, me, cand, dead, net["host_router"], net["router_dist_us"],
                          net["lan_us"])
    assert np.array_equal(nbrs, ref)


def test_leaf_merge_into_leaf_sets_equals_selecting_from_members_and_candidates(net):
    """Merged into existing leaf sets, candidates give what selecting from the members and
    the candidates gives -- rows no candidate can enter (the members again, farther ids,
    the node itself, -1), rows with a member to leave out, rows that gain -- and the
    keep-alive clocks follow their nodes: a member's from its old slot, a newcomer's
    ``now``, an empty slot's the row's first empty slot's."""
    rng = np.random.default_rng(9)
    hi, lo = net["node_ids_hi"], net["node_ids_lo"]
    me = rng.permutation(N)[:300].astype(np.int64)
    rows = np.arange(300, dtype=np.int64)      # node i of these 300 has global id me[i]
    no_failed = np.full((300, 4), -1, np.int32)
    leaves = np.full((300, 16), -1, np.int32)
    first = _cand(rng, 300, 40, me)
    first[:100, 12:] = -1                      # short sides for some rows
    kernels.merge_leaf_sets(leaves, np.zeros((300, 16), np.int64), rows, first,
                            np.zeros(300, np.int64), me, hi, lo, 8, no_failed)
    old = leaves.copy()
    heard = rng.integers(0, 10**6, (300, 16))
    old_heard = heard.copy()
    cand = _cand(rng, 300, 20, me)
    kept = rng.random(300) < 0.5               # rows offered only what cannot enter
    for i in np.flatnonzero(kept):
        members = old[i][old[i] >= 0]
        x = rng.permutation(N)[:40]           # ids that would not enter: beyond full sides
        with_x = ref_pastry.select_leaves(np.full(40, me[i]), np.c_[np.tile(old[i], (40, 1)),
                                                                     x], hi, lo, 8)
        far = x[(with_x == old[i]).all(axis=1) & ~np.isin(x, old[i])]
        offer = np.r_[rng.permutation(members), far[:3], me[i], -1][:20]
        cand[i] = np.r_[offer, -np.ones(20 - len(offer), np.int64)]
    for i in np.flatnonzero(~kept[:100]):     # a short side gains one id, the other none
        members = old[i][old[i] >= 0]
        x = np.setdiff1d(rng.permutation(N)[:40], np.r_[members, me[i]])
        down = kernels.smaller_side(hi, lo, me[i:i + 1], x[None, :])[0]
        short_down = old[i, 7] < 0
        x = x[down == short_down][:1]
        cand[i] = np.r_[rng.permutation(members), x, -np.ones(20 - len(members) - len(x),
                                                                  np.int64)]
    failed = no_failed.copy()
    dead_rows = np.flatnonzero(kept & (old[:, 0] >= 0))[:10]
    failed[dead_rows, 0] = old[dead_rows, 0]   # a member presumed failed: it leaves
    now = rng.integers(10**7, 10**8, 300)
    changed, added = kernels.merge_leaf_sets(leaves, heard, rows, cand, now, me, hi, lo, 8,
                                             failed)
    ref = ref_pastry.select_leaves(me, np.c_[old, cand], hi, lo, 8, exclude=failed)
    assert np.array_equal(leaves, ref)
    differ = (leaves != old).any(axis=1)
    assert np.array_equal(changed, differ) and differ.any() and (~differ).sum() > 100
    assert differ[dead_rows].all() and not differ[kept & ~np.isin(rows, dead_rows)].any()
    for i in range(300):
        empty = np.flatnonzero(old[i] < 0)
        for j in range(16):
            x = leaves[i, j]
            src = np.flatnonzero(old[i] == x) if x >= 0 else empty
            assert heard[i, j] == (old_heard[i, src[0]] if len(src) else now[i]), (i, j)
            if x >= 0 and x not in old[i]:
                assert x in added[i]


def test_group_rows_kernel_equals_numpy():
    rng = np.random.default_rng(5)
    for n in (1, 6, 32, 33, 400):      # (up to 32 rows sorted by insertion)
        keys = rng.integers(0, max(n // 8, 2), n)
        cand = rng.integers(-1, 1000, (n, 7))
        t = rng.integers(0, 10**9, n)
        for tt in (t, None):
            got, ref = group_rows(keys, cand, tt), ref_pastry.group_rows(keys, cand, tt)
            assert all(np.array_equal(x, y) for x, y in zip(got[:2], ref[:2], strict=True))
            assert (tt is None and got[2] is None) or np.array_equal(got[2], ref[2])


class RouterLat:
    """The engine's latency rule (``emulator.kernels.router_latency``: 0 for a node to
    itself) on a synthetic network."""

    def __init__(self, net):
        self.net = net

    def __call__(self, a, b):
        a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
        net = self.net
        return router_latency(np.asarray(net["host_router"], np.int32),
                              np.asarray(net["router_dist_us"], np.int32), int(net["lan_us"]),
                              np.ascontiguousarray(a.ravel()),
                              np.ascontiguousarray(b.ravel())).reshape(a.shape)


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


def test_table_rows_and_random_known_kernels_equal_numpy(net, holey_state):
    """The join's rows 0..spl and the randomized first hop's pick, against the numpy code
    they replaced (kept here as the reference)."""
    from actors.pastry.ids import shared_prefix_len
    rng = np.random.default_rng(4)
    hi, lo, st = net["node_ids_hi"], net["node_ids_lo"], holey_state
    li = rng.integers(0, N, 2000)
    them = rng.integers(0, N, 2000)
    them[:200] = li[:200]                          # a node and itself: every row
    got = kernels.table_rows(st.rt, li, li, them, hi, lo, st.b)
    p = shared_prefix_len(hi[li], lo[li], hi[them], lo[them], st.b)
    last = np.minimum(p, st.rt.shape[1] - 1)
    ref = st.rt[li].reshape(len(li), -1).astype(np.int64)
    ref[np.arange(ref.shape[1])[None, :] >= ((last + 1) * (1 << st.b))[:, None]] = -1
    assert np.array_equal(got, ref)

    leaf, rt = st.leaf.copy(), st.rt.copy()
    leaf[:10], rt[:10] = -1, -1                    # nodes that know nobody
    u = rng.random(len(li))
    known = np.concatenate([leaf[li], rt[li].reshape(len(li), -1)], axis=1)
    valid = known >= 0
    count = valid.sum(axis=1)
    pick = np.floor(u * np.maximum(count, 1)).astype(np.int64)
    col = np.argmax(np.cumsum(valid, axis=1) > pick[:, None], axis=1)
    ref = np.where(count > 0, known[np.arange(len(li)), col], -1)
    li[:5] = np.arange(5)
    ref[:5] = -1
    assert np.array_equal(kernels.random_known(leaf, rt, li, u), ref)


def test_pack_and_unpack_rows_kernels_equal_numpy():
    from emulator.batch import pack_rows, payload_rows
    rng = np.random.default_rng(6)
    for dtype in (np.int32, np.int64):
        rows = np.where(rng.random((300, 17)) < 0.5, rng.integers(0, 10**6, (300, 17)),
                        -1).astype(dtype)
        rows[:20] = -1                              # rows with nothing to carry
        p = pack_rows(rows)
        keep = rows >= 0
        lens = keep.sum(axis=1)
        assert np.array_equal(p["payload"], rows[keep].astype(np.int32))
        assert np.array_equal(p["pay_len"], lens)
        assert np.array_equal(p["pay_off"], np.cumsum(lens) - lens)
        m = np.zeros(len(rows), [("pay_off", "i8"), ("pay_len", "i4")])
        m["pay_off"], m["pay_len"] = p["pay_off"], p["pay_len"]
        for width in (None, 5):
            got = payload_rows(m, p["payload"], width)
            w = int(lens.max()) if width is None else width
            ref = np.full((len(rows), w), -1, np.int64)
            for i in range(len(rows)):
                seg = rows[i][keep[i]][:w]
                ref[i, :len(seg)] = seg
            assert np.array_equal(got, ref)


def _merge_nearest(nbrs, li, cand, global_ids, lat, failed):
    """A neighbourhood-set merge as ``kernels.learn`` makes it: rows of one node grouped,
    then ``merge_nearest`` with the set's key cache."""
    uk, grouped, _ = group_rows(li, cand)
    keys, known = nbrs.key_cache()
    kernels.merge_nearest(nbrs.members, keys, known, uk, global_ids, grouped, failed, *lat)


def test_neighbourhood_merges_with_kept_keys_equal_selection_from_scratch(net):
    """Rounds of merges (one candidate or many, repeats, the node itself, failed ids, ids
    dropped between rounds as a presumed failure does) give, round after round, the sets
    that selecting from scratch over the members and the candidates gives."""
    from actors.pastry.neighbourhood import NeighbourhoodSet
    rng = np.random.default_rng(8)
    n, m = 60, 16
    me = np.arange(n, dtype=np.int64)
    lat = (np.asarray(net["host_router"], np.int32), np.asarray(net["router_dist_us"], np.int32),
           int(net["lan_us"]))
    ref = np.full((n, m), -1, np.int32)
    nbrs = NeighbourhoodSet(ref.copy())
    failed = np.full((n, 8), -1, np.int32)
    for _ in range(300):
        k = int(rng.integers(1, 12))
        li = rng.integers(0, n, k)
        width = 1 if rng.random() < 0.7 else int(rng.integers(2, 30))
        cand = rng.integers(-1, N, (k, width))
        if rng.random() < 0.3:
            cand[:, -1] = ref[li, 0]                      # a member offered again
        if rng.random() < 0.2:
            cand[:, 0] = li                               # a node offered itself
        if rng.random() < 0.3:                            # some node presumes one failed
            x = int(rng.integers(0, n))
            dead = int(rng.integers(0, N))
            failed[x, rng.integers(0, 8)] = dead
            hit = ref[x] == dead
            ref[x, hit] = -1
            # (as handler_kernels.presume_failed drops it: the member and its kept key)
            nbrs.members[x, nbrs.members[x] == dead] = -1
            nbrs.key_cache()[1][x] = False
        _merge_nearest(nbrs, li, cand, me, lat, failed)
        uk, grouped, _ = group_rows(li, cand)
        both = np.concatenate([ref[uk].astype(np.int64), grouped], axis=1)
        ref[uk] = ref_pastry.select_nearest(me[uk], both, m, RouterLat(net),
                                            exclude=failed[uk])
        assert np.array_equal(nbrs.members, ref)


def test_unique_first_equals_numpy_unique_with_first_indices():
    rng = np.random.default_rng(9)
    for n in (0, 1, 5, 32, 33, 300):
        keys = rng.integers(0, 20, n).astype(np.int64)
        vals, first = unique_first(keys)
        ref_vals, ref_first = np.unique(keys, return_index=True)
        assert np.array_equal(vals, ref_vals) and np.array_equal(first, ref_first)


def test_stable_order_equals_a_stable_argsort():
    """The compiled kernels' stable order (by insertion up to INSERTION_MAX keys, numba's
    merge sort above) is numpy's stable argsort: equal keys keep their input order."""
    rng = np.random.default_rng(12)
    for n in (*range(0, INSERTION_MAX + 3), 300):
        for dtype in (np.int64, np.int32, np.uint64):
            keys = rng.integers(0, max(n // 3, 1), n).astype(dtype)
            out = np.full(n, -1, np.int64)
            stable_order(keys, out)
            assert np.array_equal(out, np.argsort(keys, kind="stable")), (n, dtype)


def test_learn_in_one_kernel_equals_the_parts_one_after_the_other(net, holey_state):
    """kernels.learn (PastryNodes.learn's one compiled call) writes what forgetting the
    senders, inserting into the tables, then selecting, diffing and writing the leaf sets
    in numpy, and merging the neighbourhood sets, wrote: failed memory, tables, members,
    keep-alive clocks (empty slots' too), neighbourhood sets, probe count and result."""
    from actors.pastry.neighbourhood import NeighbourhoodSet
    rng = np.random.default_rng(10)
    hi, lo = net["node_ids_hi"], net["node_ids_lo"]
    lat = (np.asarray(net["host_router"], np.int32), np.asarray(net["router_dist_us"], np.int32),
           int(net["lan_us"]))
    members, rt = holey_state.leaf.copy(), holey_state.rt.copy()
    heard = rng.integers(0, 10**6, members.shape)
    failed = np.where(rng.random((N, 8)) < 0.3, rng.integers(0, N, (N, 8)), -1).astype(np.int32)
    ids = np.arange(N, dtype=np.int64)
    got_m, got_rt, got_h, got_f = members.copy(), rt.copy(), heard.copy(), failed.copy()
    got_nbrs, ref_nbrs = NeighbourhoodSet(holey_state.nbr.copy()), NeighbourhoodSet(
        holey_state.nbr.copy())
    for step in range(30):
        li = rng.integers(0, N, 40)
        cand = _cand(rng, 40, 5, li)
        t = rng.integers(10**6, 2 * 10**6, 40)
        forget = step % 2 == 1
        senders = np.where(rng.random(40) < 0.5, failed[li, 0], rng.integers(0, N, 40))
        nbrs = step % 3 != 0
        got = kernels.learn(got_rt, got_m, got_h, got_f, got_nbrs.members,
                            *got_nbrs.key_cache(), ids, li, cand, t, hi, lo, 4, 8, *lat,
                            senders.astype(np.int64), forget, nbrs)
        if forget:
            hit = failed[li] == senders[:, None]
            r, c = np.nonzero(hit)
            failed[li[r], c] = -1
        probes = kernels.insert_table(rt, li, ids, cand, hi, lo, 4, *lat, failed)
        uk, grouped, tmax = group_rows(li, cand, t)
        old = members[uk]
        new = ref_pastry.select_leaves(ids[uk], np.concatenate([old, grouped], axis=1), hi, lo,
                                       8, exclude=failed[uk])
        changed, added, clocks = ref_pastry.leaf_changes(old, new, heard[uk], tmax)
        if changed.any():
            heard[uk], members[uk] = clocks, new
        if nbrs:
            _merge_nearest(ref_nbrs, li, cand, ids, lat, failed)
        assert np.array_equal(got_nbrs.members, ref_nbrs.members)
        assert got[0] == probes and np.array_equal(got[1], uk)
        assert np.array_equal(got[2], changed)
        # (no rows of ``added`` when no row could change: a merge that changes nothing
        # makes no array for it)
        assert np.array_equal(got[3], added) if len(got[3]) else not changed.any()
        assert np.array_equal(got[4], tmax)
        assert np.array_equal(got_m, members) and np.array_equal(got_h, heard)
        assert np.array_equal(got_rt, rt) and np.array_equal(got_f, failed)
    assert (got_rt != holey_state.rt).any() and (got_m != holey_state.leaf).any()
    assert (got_nbrs.members != holey_state.nbr).any()


def test_failed_memory_forget_and_next_draws_equal_their_references():
    from actors.pastry.failed import FailedNodes
    from emulator.batch import rank_within
    from emulator.rng import next_draws, node_uniform
    rng = np.random.default_rng(11)
    f = FailedNodes(50, 8)
    f.ids[:] = rng.integers(-1, 30, f.ids.shape)
    ref = f.ids.copy()
    li = rng.integers(0, 50, 200)
    senders = rng.integers(0, 30, 200)
    hit = ref[li] == senders[:, None]                       # the numpy code it replaces
    r, c = np.nonzero(hit)
    ref[li[r], c] = -1
    f.forget(li, senders)
    assert np.array_equal(f.ids, ref)
    for seed in (0, 7, 2**40 + 3, 2**64 - 1):
        draws = rng.integers(0, 40, 50).astype(np.int64)
        nodes = rng.integers(0, 50, 300).astype(np.int64)
        want = node_uniform(seed, nodes, draws[nodes] + rank_within(nodes))
        after = draws.copy()
        np.add.at(after, nodes, 1)
        got = next_draws(seed, nodes, nodes.astype(np.int32), draws)
        assert np.array_equal(got, want) and np.array_equal(draws, after)


def test_keepalive_heard_equals_the_numpy_update():
    """The keep-alive's leaf-set update equals the numpy it replaced (np.maximum.at over
    every slot holding the sender; strangers = rows whose sender is in no slot), with
    repeated receivers, repeated senders and senders listed twice."""
    rng = np.random.default_rng(7)
    members = rng.integers(-1, 40, (30, 8)).astype(np.int32)
    members[3, :2] = 5                      # one sender in two slots of one node
    heard0 = rng.integers(0, 1000, members.shape).astype(np.int64)
    li = rng.integers(0, 30, 200).astype(np.int64)
    src = rng.integers(0, 40, 200).astype(np.int64)
    li[:3], src[:3] = 3, 5
    time = rng.integers(0, 2000, 200).astype(np.int64)
    ref = heard0.copy()
    hit = members[li] == src[:, None]
    r, c = np.nonzero(hit)
    np.maximum.at(ref, (li[r], c), time[r])
    got = heard0.copy()
    stranger = kernels.keepalive_heard(members, got, li, src, time)
    assert np.array_equal(got, ref)
    assert np.array_equal(stranger, ~hit.any(axis=1))
    assert stranger.any() and not stranger.all()


def test_route_log_kernel_equals_the_numpy_columns():
    """The `route` log's columns of the delivered messages, as the router computed them
    with numpy before (take the delivered rows, cast each column)."""
    from actors.messages import MSG_DTYPE
    rng = np.random.default_rng(11)
    n = 40
    m = np.zeros(n, MSG_DTYPE)
    m["origin"] = rng.integers(0, 10**6, n)
    m["dst"] = rng.integers(0, 10**6, n)
    m["type"] = rng.integers(10, 60, n)
    m["time"] = rng.integers(10**6, 10**9, n)
    m["path_us"] = rng.integers(0, 10**6, n)
    m["hops"] = rng.integers(0, 9, n)
    for kind in (rng.integers(0, 4, n).astype(np.int8), np.full(n, kernels.ON_APP, np.int8),
                 np.full(n, kernels.HERE_OWN, np.int8)):
        here = kind <= kernels.HERE_APP
        d = m[here]
        ref = (d["origin"].astype(np.int32), d["dst"].astype(np.int32),
               d["type"].astype(np.int16), (d["time"] - d["path_us"]).astype(np.int64),
               d["time"].astype(np.int64), d["hops"].astype(np.int16),
               d["path_us"].astype(np.int64))
        got = np.empty(int(here.sum()), kernels.ROUTE_LOG_DTYPE)
        kernels.route_log(m, kind, got)
        for name, b in zip(kernels.ROUTE_LOG_DTYPE.names, ref, strict=True):
            a = np.ascontiguousarray(got[name])
            assert a.dtype == b.dtype and np.array_equal(a, b)


def test_hop_identity_and_ack_matching_kernels_equal_numpy():
    """A hop's 64-bit identity (every field width and sign the record has, keys with the
    top bit set) as the sender keeps it (handler_kernels.expect_hops: with its deadline
    and the record at its sending time), and the multiset clearing of pending hops by
    acks, against the numpy code they replaced."""
    from actors.pastry.handler_kernels import expect_hops
    from actors.pastry.messages import MSG_DTYPE
    from reference_pastry import acked_pending, hop_hash

    rng = np.random.default_rng(3)
    m = np.zeros(500, MSG_DTYPE)
    m["src"], m["dst"] = rng.integers(0, 10**6, 500), rng.integers(0, 10**6, 500)
    m["origin"] = rng.integers(-1, 10**6, 500)
    m["type"], m["hops"] = rng.integers(10, 90, 500), rng.integers(0, 30, 500)
    m["key_hi"] = rng.integers(0, 2**63, 500).astype(np.uint64) * np.uint64(2) + np.uint64(1)
    m["key_lo"] = rng.integers(0, 2**63, 500).astype(np.uint64)
    m["sent"] = rng.integers(0, 10**9, 500)
    m["time"] = m["sent"] + rng.integers(0, 10**5, 500)
    cols = [m[f] for f in ("src", "dst", "origin", "type", "hops", "key_hi", "key_lo")]
    pending, deadline = np.zeros(600, MSG_DTYPE), np.zeros(600, np.int64)
    identity, count = np.zeros(600, np.uint64), np.array([7])
    expect_hops(m, 1000, pending, deadline, identity, count)
    assert count[0] == 507
    assert np.array_equal(identity[7:507], hop_hash(*cols))
    assert np.array_equal(deadline[7:507], m["sent"] + 2 * (m["time"] - m["sent"]) + 1000)
    assert np.array_equal(pending["time"][7:507], m["sent"])
    for f in MSG_DTYPE.names:
        if f != "time":
            assert np.array_equal(pending[f][7:507], m[f]), f
    for _ in range(200):   # repeated identities on both sides, acks with no pending copy
        identity = rng.integers(0, 6, int(rng.integers(0, 30))).astype(np.uint64)
        acks = rng.integers(0, 8, int(rng.integers(1, 10))).astype(np.uint64)
        assert np.array_equal(kernels.acked_pending(identity, acks),
                              acked_pending(identity, acks))


def test_ask_rows_sends_each_empty_slot_to_its_next_helper():
    """ROW_REQ's helper choice (handler_kernels.ask_rows) against the numpy rule: the
    attempt-th live entry from the slot's row on, none for a filled slot, a last attempt
    or a table without that many entries; the sends in slot order, with row, column and
    attempt."""
    from actors.pastry import handler_kernels as hk
    from actors.pastry.messages import MSG_DTYPE
    from actors.pastry.types import ROW_REQ, RowReq
    from reference_pastry import row_helpers

    rng = np.random.default_rng(8)
    hr, rdist, lan = np.zeros(200, np.int32), np.zeros((1, 1), np.int32), np.int64(0)
    for _ in range(100):
        rt = np.where(rng.random((6, 4, 4)) < 0.4, rng.integers(0, 50, (6, 4, 4)), -1)
        rt = rt.astype(np.int32)
        n = int(rng.integers(0, 12))
        li = rng.integers(0, 6, n)
        row, col = rng.integers(0, 4, n), rng.integers(0, 4, n)
        attempt = rng.integers(0, hk.ROW_ATTEMPTS + 2, n)
        t = rng.integers(0, 10**6, n)
        global_ids = np.arange(100, 106)
        out = np.zeros(n, MSG_DTYPE)
        requests, k, _ = hk.ask_rows(li, row, col, attempt, t, rt, global_ids,
                                     np.int64(ROW_REQ), out, np.zeros(1, np.int32),
                                     np.int64(0), hr, rdist, lan)
        helper = row_helpers(rt, li, row, col, attempt, hk.ROW_ATTEMPTS)
        asks = helper >= 0
        assert requests == k == asks.sum()
        sent = out[:k]
        assert np.array_equal(sent["dst"], helper[asks])
        assert np.array_equal(sent["src"], global_ids[li[asks]])
        assert np.array_equal(sent[RowReq.row], row[asks])
        assert np.array_equal(sent[RowReq.column], col[asks])
        assert np.array_equal(sent["hops"], attempt[asks])
        assert np.array_equal(sent["sent"], t[asks]) and (sent["type"] == ROW_REQ).all()


def test_presume_failed_kernel_equals_the_numpy_presumption(holey_state):
    """handler_kernels.presume_failed against the numpy rule (reference_pastry): repeated
    and already-known deaths, several at one node, leaves, neighbours and table slots
    emptied, each leaf side closed up with its clocks, the failed memory's slots, and a
    ROW_REQ from every emptied slot to its first helper, in (presumption, row, column)
    order; declined, with nothing changed, when the room is short."""
    from actors.pastry import handler_kernels as hk
    from actors.pastry.messages import MSG_DTYPE
    from actors.pastry.types import ROW_REQ
    from reference_pastry import presume_failed, row_helpers

    rng = np.random.default_rng(11)
    hr, rdist, lan = np.zeros(N, np.int32), np.zeros((1, 1), np.int32), np.int64(0)
    global_ids = np.arange(N, dtype=np.int64)
    seen = np.zeros(3, np.int64)    # requests sent, leaf sets that lost a member, known deaths
    for trial in range(60):
        st = holey_state
        rt, leaf, nbr = st.rt.copy(), st.leaf.copy(), st.nbr.copy()
        heard = rng.integers(0, 10**6, leaf.shape).astype(np.int64)
        failed = np.where(rng.random((N, 4)) < 0.3, rng.integers(0, N, (N, 4)), -1)
        failed = failed.astype(np.int32)
        failed_next = rng.integers(0, 9, N).astype(np.int64)
        n = int(rng.integers(1, 25))
        li = rng.integers(0, 8, n).astype(np.int64)     # few nodes: several deaths at one
        # dead ids from the nodes' own leaves, tables and failed memory, and strangers
        pick = np.stack([leaf[li, rng.integers(0, leaf.shape[1], n)],
                         rt[li, rng.integers(0, rt.shape[1], n),
                            rng.integers(0, rt.shape[2], n)],
                         failed[li, rng.integers(0, 4, n)],
                         rng.integers(0, N, n)], axis=1)
        dead = pick[np.arange(n), rng.integers(0, 4, n)].astype(np.int64)
        dead = np.where(dead < 0, rng.integers(0, N, n), dead)
        if trial % 5 == 0:
            li, dead = np.r_[li, li[:3]], np.r_[dead, dead[:3]]       # repeats
        t = rng.integers(0, 10**6, len(li)).astype(np.int64)
        want = [a.copy() for a in (rt, leaf, heard, failed, failed_next, nbr)]
        (kept_li, _), slots, lost_want = presume_failed(*want, li, dead)
        got = [a.copy() for a in (rt, leaf, heard, failed, failed_next, nbr)]
        known = np.ones(N, np.bool_)
        counts = np.zeros(hk.N_RUN_COUNTS, np.int64)
        room = len(li) * rt.shape[1] * rt.shape[2]
        out = np.zeros(room, MSG_DTYPE)
        lost, k, _ = hk.presume_failed(
            li, dead, t, got[0], got[1], got[2], got[3], got[4], got[5], known, global_ids,
            np.int64(leaf.shape[1] // 2), np.int64(room), np.int64(ROW_REQ), counts, out,
            np.zeros(1, np.int32), np.int64(0), hr, rdist, lan)
        for name, a, b in zip(("rt", "leaf", "heard", "failed", "next", "nbr"), got, want,
                              strict=True):
            assert np.array_equal(a, b), (trial, name)
        assert np.array_equal(lost, lost_want)
        i, row, col = slots
        first = np.sort(np.unique(li * (1 << 32) + dead, return_index=True)[1])
        keep_t = t[first][~(failed[li[first]] == dead[first][:, None]).any(axis=1)]
        helper = row_helpers(want[0], kept_li[i], row, col, np.zeros(len(i), np.int64),
                             hk.ROW_ATTEMPTS)
        asks = helper >= 0
        assert k == asks.sum() == counts[hk.N_ROW_REQUESTS]
        assert np.array_equal(out["dst"][:k], helper[asks])
        assert np.array_equal(out["src"][:k], kept_li[i][asks])
        assert np.array_equal(out["sent"][:k], keep_t[i][asks])
        assert (out["type"][:k] == ROW_REQ).all()
        seen += np.array([k, len(lost), len(first) - len(kept_li)])
        if len(i) > 1:   # short of room: declined, nothing changed
            again = [a.copy() for a in (rt, leaf, heard, failed, failed_next, nbr)]
            _, k, _ = hk.presume_failed(
                li, dead, t, *again, known, global_ids, np.int64(leaf.shape[1] // 2),
                np.int64(len(i) - 1), np.int64(ROW_REQ), counts, out,
                np.zeros(1, np.int32), np.int64(0), hr, rdist, lan)
            assert k == -1
            for a, b in zip(again, (rt, leaf, heard, failed, failed_next, nbr), strict=True):
                assert np.array_equal(a, b)
    assert (seen > 0).all(), seen     # every case above came up


def test_hops_due_equals_the_latest_timer_per_sender():
    """ACK_TIMER's due check: a pending hop is due when the latest timer row of its sender
    is at or past its deadline (the per-node numpy form it replaced), with repeated
    senders and timers, senders without a timer and ties at the deadline."""
    from actors.pastry.messages import MSG_DTYPE

    rng = np.random.default_rng(21)
    for _ in range(200):
        pending = np.zeros(int(rng.integers(0, 40)), MSG_DTYPE)
        pending["src"] = rng.integers(0, 8, len(pending))
        deadline = rng.integers(0, 10, len(pending))
        m = np.zeros(int(rng.integers(1, 6)), MSG_DTYPE)
        m["dst"], m["time"] = rng.integers(0, 8, len(m)), rng.integers(0, 10, len(m))
        t_of = np.full(8, np.iinfo(np.int64).min, np.int64)
        np.maximum.at(t_of, m["dst"], m["time"])
        ref = deadline <= t_of[pending["src"]]
        due, n_due = kernels.hops_due(pending, deadline, m)
        assert np.array_equal(due, ref) and n_due == ref.sum()


def test_sender_and_payload_kernel_equals_payload_rows_with_the_sender():
    """The compiled candidates matrix is the payload rows (batch.payload_rows) with the
    sender appended, for empty segments, a batch without payload and strided records."""
    from actors.pastry.messages import MSG_DTYPE, sender_and_payload
    from emulator.batch import pack_rows, payload_rows
    rng = np.random.default_rng(12)
    for n, width in ((0, 3), (1, 1), (7, 20), (50, 40)):
        ids = rng.integers(-1, N, (n, width))
        ids[rng.random(ids.shape) < 0.5] = -1
        p = pack_rows(ids)
        m = np.zeros(2 * n, MSG_DTYPE)[::2]                  # strided, as a sub-batch
        m["src"] = rng.integers(0, N, n)
        m["pay_off"], m["pay_len"] = p["pay_off"], p["pay_len"]
        for payload in (p["payload"], np.zeros(0, np.int32)):
            ref = np.concatenate([payload_rows(m, payload), m["src"].astype(np.int64)[:, None]],
                                 axis=1)
            got = sender_and_payload(m, payload)
            assert got.dtype == np.int64 and np.array_equal(got, ref)


def test_rows_and_equals_rows_concatenated_with_a_column(holey_state):
    rng = np.random.default_rng(13)
    li = rng.integers(0, N, 30)
    last = rng.integers(0, N, 30)
    ref = np.concatenate([holey_state.leaf[li], last.astype(np.int32)[:, None]], axis=1)
    got = kernels.rows_and(holey_state.leaf, li, last)
    assert got.dtype == np.int32 and np.array_equal(got, ref)


def test_newly_joined_equals_unique_then_masks():
    rng = np.random.default_rng(14)
    n = 50
    for _ in range(50):
        joined = rng.random(n) < 0.3
        nbrs_got = rng.random(n) < 0.7
        expected = rng.integers(-1, 4, n)
        got_rows = rng.integers(0, 5, n)
        li = rng.integers(0, n, int(rng.integers(0, 12)))
        t = rng.integers(0, 10**6, len(li))
        u, first = np.unique(li, return_index=True)
        done = ~joined[u] & nbrs_got[u] & (expected[u] >= 0) & (got_rows[u] >= expected[u])
        ref_joined = joined.copy()
        ref_joined[u[done]] = True
        out_li, out_t = kernels.newly_joined(li, t, joined, nbrs_got, expected, got_rows)
        assert np.array_equal(out_li, u[done]) and np.array_equal(out_t, t[first][done])
        assert np.array_equal(joined, ref_joined)


def test_latency_inputs_take_the_models_router_tables_else_the_shared_inputs():
    """Pastry's delays come from the engine's router-table model; a context whose model has
    none (or a context without the query) gives the shared inputs; an error inside the
    query is not taken for a missing model."""
    from actors.pastry.nodes import latency_inputs

    shared = {"host_router": [0, 1], "router_dist_us": [[0, 5], [5, 0]], "lan_us": 7}

    class Ctx:
        def __init__(self, tables):
            self._tables = tables

        def shared(self, name):
            return shared[name]

        def latency_tables(self):
            if self._tables == "broken":
                raise AttributeError("a bug inside the query")
            return self._tables

    class Bare:
        shared = Ctx.shared

    model = (np.array([1, 0]), np.array([[0, 9], [9, 0]]), 3)
    hr, rdist, lan = latency_inputs(Ctx(model))
    assert hr.tolist() == [1, 0] and rdist[0, 1] == 9 and lan == 3
    for ctx in (Ctx(None), Bare()):
        hr, rdist, lan = latency_inputs(ctx)
        assert hr.dtype == np.int32 and hr.tolist() == [0, 1] and rdist[0, 1] == 5 and lan == 7
    with pytest.raises(AttributeError, match="a bug inside"):
        latency_inputs(Ctx("broken"))


def test_prefetch_is_a_cache_hint_that_changes_nothing():
    """The kernels name the next node's state to the caches with ``prefetch``: it lowers to
    the CPU's prefetch instruction, for any dtype and integer offset, reads nothing back
    and faults on no address (an offset beyond the array included)."""
    @numba.njit
    def hint_then_sum(a, offset):
        prefetch(a, offset)
        return a.sum()

    for a in (np.arange(12, dtype=np.int32).reshape(3, 4), np.arange(5, dtype=np.uint64)):
        for offset in (np.int64(2), np.int32(1), np.int64(10**9)):
            assert hint_then_sum(a, offset) == a.sum()
    asm = "\n".join(hint_then_sum.inspect_asm(sig) for sig in hint_then_sum.signatures)
    assert "prefetch" in asm or "prfm" in asm        # x86-64 / arm64
    with pytest.raises(numba.core.errors.TypingError):
        numba.njit(lambda x: prefetch(x, 0))(3)

    @numba.njit
    def hint_then_delay(hr, rdist, a, b):
        prefetch_delay(hr, rdist, a, b)
        return host_delay(hr, rdist, 7, a, b)

    hr, rdist = np.array([0, 2, 1], np.int32), np.arange(9, dtype=np.int32).reshape(3, 3)
    assert hint_then_delay(hr, rdist, 1, 2) == rdist[2, 1] + 14
    assert "prefetch" in hint_then_delay.inspect_asm(hint_then_delay.signatures[0]) or \
        "prfm" in hint_then_delay.inspect_asm(hint_then_delay.signatures[0])
