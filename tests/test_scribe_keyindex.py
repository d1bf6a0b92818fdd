"""KeyIndex (sorted main + delta) against a Python dict, including merges and ranges."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.scribe.keyindex import KeyIndex


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 500), max_size=40), max_size=12))
def test_matches_a_dict(batches):
    ix = KeyIndex(min_delta=8)  # small delta: merges happen often
    ref = {}
    for batch in batches:
        vals, new = ix.insert(np.array(batch, np.int64))
        for i, k in enumerate(batch):
            if k not in ref:
                assert new[i]
                ref[k] = len(ref)
            else:
                assert not new[i]
            assert vals[i] == ref[k]
    probe = np.arange(-2, 503)
    got = ix.lookup(probe)
    assert all(got[i] == ref.get(int(k), -1) for i, k in enumerate(probe))
    # ranges over both sorted runs (main and the unmerged delta), empty and reversed ones
    rng = np.random.default_rng(len(ref))
    lo = np.r_[0, 100, 250, 600, rng.integers(-5, 505, 20)]
    hi = np.r_[50, 100, 400, 700, lo[4:] + rng.integers(-3, 200, 20)]
    qi, v = ix.ranges(lo, hi)
    assert qi.dtype == np.int64 and v.dtype == np.int32
    assert (np.diff(qi) >= 0).all()
    for q in range(len(lo)):
        expect = [ref[k] for k in sorted(ref) if lo[q] <= k < hi[q]]
        assert v[qi == q].tolist() == expect


def test_lookup_and_ranges_with_keys_in_both_runs():
    ix = KeyIndex(min_delta=1000)   # nothing merges: half the keys stay in the delta
    ix.insert(np.arange(0, 200, 2, dtype=np.int64))
    ix._merge()
    ix.insert(np.arange(1, 200, 2, dtype=np.int64))
    assert len(ix.keys) == 100 and len(ix.dkeys) == 100
    assert ix.lookup(np.array([4, 5, 199, 200, -1])).tolist() == [2, 102, 199, -1, -1]
    qi, v = ix.ranges(np.array([3, 10]), np.array([7, 12]))
    assert qi.tolist() == [0, 0, 0, 0, 1, 1]
    assert v.tolist() == [101, 2, 102, 3, 5, 105]
