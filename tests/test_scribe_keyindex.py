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
    lo = np.array([0, 100, 250, 600])
    hi = np.array([50, 100, 400, 700])
    qi, v = ix.ranges(lo, hi)
    for q in range(len(lo)):
        expect = [ref[k] for k in sorted(ref) if lo[q] <= k < hi[q]]
        assert v[qi == q].tolist() == expect
