"""Rendezvous points: the replica set from Pastry's leaf sets against a numpy reference,
and CREATE and REPLICA through the stack's compiled loop against the handlers' path."""

import numpy as np

from actors.pastry.leafset import replica_sets
from actors.scribe import create_requests
from test_scribe_tree import G, build, make_groups


def replica_sets_reference(members, li, k):
    """The k members nearest each node: the two sides interleaved (nearest smaller,
    nearest larger, ...), empty places skipped, -1 padded."""
    half = members.shape[1] // 2
    leaf = members[li]
    out = np.full((len(li), k), -1, np.int32)
    inter = np.stack([leaf[:, :half], leaf[:, half:]], axis=2).reshape(len(li), -1)
    for row in range(len(li)):
        got = inter[row][inter[row] >= 0][:k]
        out[row, :len(got)] = got
    return out


def test_replica_sets_match_reference():
    rng = np.random.default_rng(5)
    members = rng.integers(0, 10_000, (200, 16)).astype(np.int32)
    members[rng.random(members.shape) < 0.3] = -1     # holes anywhere, whole empty sides
    members[:10, :8] = -1
    members[10:20] = -1
    li = rng.integers(0, 200, 300)
    for k in (0, 1, 5, 16, 20):
        got = replica_sets(members, li, np.int64(k))
        assert got.dtype == np.int32 and got.shape == (300, k)
        assert np.array_equal(got, replica_sets_reference(members, li, k)), k


def _by_group(cols):
    order = np.lexsort((cols["time"], cols["group"])) if "time" in cols \
        else np.argsort(cols["group"], kind="stable")
    return {c: v[order] for c, v in cols.items()}


def test_create_in_the_compiled_loop_matches_the_python_loop(monkeypatch):
    """CREATE at the RPs (with the records sent to their replicas and kept there) and the
    duplicates refused: through the stack's compiled loop (CREATE_REQ runs with their
    CREATEs' first routing step, routed CREATE runs, REPLICA runs in ``on_runs``) and
    through the handlers' path (``RendezvousPoints`` calling the same kernels one cell at
    a time) the same run: counters, sends, trees with their replicas' records, the route
    log, and the same group and refusal rows (each path logs them at its own moment, so
    compared group by group), on two shards."""
    from actors.scribe.types import CREATE, REPLICA
    from protocol_world import run_without_loop, same_outcome

    table, creators, creds, members = make_groups(seed=8)
    again = np.arange(4)

    def run():
        w = build(31, 2, table, creators, creds, members)
        # a second creation of four groups, by another node: refused at the RP
        w.inject(create_requests((creators[again] + 1) % 500, again, 3_000_000, creds[again]))
        w.run()
        python = sum(e.python_events for e in w.emu.engines)
        w.dump()
        logs = {name: w.table(name) for name in ("tree_edge", "route")}
        kept = {name: _by_group(w.table(name)) for name in ("group", "refused")}
        trees = [e.stack.app.tree.state() for e in w.emu.engines]
        return logs, w.counters, w.sent, trees, python, kept

    looped = run()
    sent = looped[2]
    assert sent.get(CREATE, 0) > G and sent.get(REPLICA, 0) >= 4 * G, sent
    assert looped[1]["scribe_refused_create"] == len(again)
    assert len(looped[5]["group"]["group"]) == G
    fast = run_without_loop(monkeypatch, run)
    # without the loop Python saw every request, CREATE and REPLICA; with it, the loop
    # took most (the refused ones go to Python, and a few cells after each)
    creates = G + len(again) + sent[CREATE] + sent[REPLICA]
    assert fast[4] - looped[4] > 0.8 * creates, (fast[4], looped[4], creates)
    same_outcome(looped, fast)
    for name, cols in looped[5].items():
        assert cols.keys() == fast[5][name].keys()
        for c, v in cols.items():
            assert np.array_equal(v, fast[5][name][c]), (name, c)
