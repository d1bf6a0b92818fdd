"""table_quality / route_paths on inconsistent states: a routing loop is a counted figure
(``looping_routes``), not an exception that loses the whole measurement."""

import numpy as np
import pytest

from actors.pastry.quality import route_paths, table_quality
from actors.pastry.routing import next_hop
from actors.pastry.state import PastryState


def _loop_state():
    """A (id 0x10..) knows only B (0x20..) in a short leaf side, so it claims the upper half
    ring and hands key 0x1FF0.. to B, the closest node it knows; B's leaf set is full of
    nodes between the key and B (not covering the key), and its table sends the key (first
    digit 1) back to A: A -> B -> A -> ... (the shape found after a protocol bootstrap of
    10k nodes on ts5050 at 1000 joins/s)."""
    hi = np.array([0x1000 << 48, 0x2000 << 48] + [(0x1FF8 << 48) + (i << 40) for i in range(8)],
                  np.uint64)
    lo = np.zeros(len(hi), np.uint64)
    n = len(hi)
    st = PastryState.empty(n, n)
    a, b, d = 0, 1, np.arange(2, 10)
    st.leaf[a, 8] = b
    st.leaf[b, :8] = d[::-1]                 # smaller side, nearest first
    st.rt[b, 0, 1] = a                        # row 0, digit 1
    for x in d:                               # D nodes: every node listed, deliver correctly
        small = np.r_[d[d < x][::-1], a]
        st.leaf[x, :len(small)] = small
        st.leaf[x, 8:8 + len(d[d > x]) + 1] = np.r_[d[d > x], b]
    return st, hi, lo


def test_route_paths_marks_loops_and_table_quality_counts_them():
    st, hi, lo = _loop_state()
    kh, kl = np.array([0x1FF0 << 48], np.uint64), np.zeros(1, np.uint64)
    assert next_hop(st, [0], [0], kh, kl, hi, lo)[0][0] == 1
    assert next_hop(st, [1], [1], kh, kl, hi, lo)[0][0] == 0
    with pytest.raises(RuntimeError, match="routing loop"):
        route_paths(st, hi, lo, np.array([0]), kh, kl)
    final, hops, _ = route_paths(st, hi, lo, np.array([0, 3]), np.r_[kh, kh], np.r_[kl, kl],
                                 on_loop="mark")
    assert final[0] == -1 and hops[0] == 64 and final[1] >= 0
    n = len(hi)
    q = table_quality(st, hi, lo, np.zeros(n, np.int32), np.zeros((1, 1), np.int32), 1000,
                      n_routes=4000, seed=0, oracle=st)
    assert 0 < q["looping_routes"] < 1
    assert q["correct"] <= 1 - q["looping_routes"]
    assert np.isfinite(q["hops_mean"]) and np.isfinite(q["stretch_mean"])


def _run_on_saved_topology(tmp_path, nodes: int):
    """What scenarios/phases.py's oracle process reads of a run: its saved topology (a small
    ts600 one), the node count, the seed and the run directory."""
    from types import SimpleNamespace

    from topologies import make_topology

    topo = make_topology("ts600", 3, nodes)
    (tmp_path / "topology").mkdir()
    topo.save(tmp_path / "topology" / "topo-0.npz")
    return SimpleNamespace(run_dir=tmp_path, t=0, seed_t=3, cfg=SimpleNamespace(nodes=nodes),
                           topo=topo), topo


def test_the_oracle_computed_beside_the_join_is_the_one_computed_in_place(tmp_path):
    """scenarios/phases.py has a process of its own compute the oracle the table-quality
    check compares with while the shards run the join (scenarios/oracle_job.py): the same
    state, array for array, as computing it in the driver, from a process in a session of
    its own (a terminal's Ctrl-C does not reach it), whose file goes with it."""
    import os

    from actors.pastry.ids import node_ids
    from actors.pastry.oracle import oracle_state
    from scenarios.phases import _OracleBeside

    n, params = 400, {"b": 4, "l": 8, "m": 16}
    run, topo = _run_on_saved_topology(tmp_path, n)
    with _OracleBeside(run, params) as oracle:
        assert os.getsid(oracle.proc.pid) != os.getsid(0)
        got = oracle.result()
        assert oracle.out.is_file()
    assert not oracle.out.exists()
    hi, lo = node_ids(n, 3)
    want = oracle_state(np.arange(n), hi, lo, topo.host_router, topo.dist_matrix(), topo.lan_us,
                        **params)
    for name in ("rt", "leaf", "nbr"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert got.b == want.b


def test_the_quality_check_computes_the_oracle_itself_when_its_process_failed(tmp_path):
    """The oracle's process fails (a broken topology file), or there is none (no run
    directory): the check computes the oracle in the driver and gives the figures of an
    oracle computed beside it; an oracle made for other b, l or m than the shards' is
    refused."""
    from types import SimpleNamespace

    from actors.pastry.ids import node_ids
    from actors.pastry.oracle import oracle_state
    from scenarios.phases import _OracleBeside, _overlay_quality

    n, params = 300, {"b": 4, "l": 8, "m": 16}
    run, topo = _run_on_saved_topology(tmp_path, n)
    hi, lo = node_ids(n, 3)
    exact = oracle_state(np.arange(n), hi, lo, topo.host_router, topo.dist_matrix(),
                         topo.lan_us, **params)
    run.shared = {"node_ids_hi": hi, "node_ids_lo": lo}
    run.emu = SimpleNamespace(call=lambda method: [(np.arange(n), {
        "rt": exact.rt, "leaf": exact.leaf, "nbr": exact.nbr, "b": 4})])
    with _OracleBeside(run, params) as oracle:
        beside = _overlay_quality(run, oracle)
    (tmp_path / "topology" / "topo-0.npz").write_bytes(b"not a topology")
    with _OracleBeside(run, params) as oracle:
        in_place = _overlay_quality(run, oracle)
        assert oracle.proc.returncode != 0
    assert in_place == beside
    run.run_dir = None      # no saved topology: no process
    with _OracleBeside(run, params) as oracle:
        assert oracle.proc is None
        assert _overlay_quality(run, oracle) == beside
    assert beside["fraction_optimal"] == 1.0 and beside["leaf_sets_exact"] == 1.0

    run.emu = SimpleNamespace(call=lambda method: [(np.arange(n), {
        "rt": exact.rt, "leaf": exact.leaf[:, :4], "nbr": exact.nbr, "b": 4})])
    with pytest.raises(RuntimeError, match="b, l, m = 4, 8, 16"):
        _overlay_quality(run, SimpleNamespace(result=lambda: exact))
