"""KeyIndex (hash table + per-prefix chains) against a Python dict, through growth,
prefix listings and checkpoints."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.scribe.keyindex import KeyIndex, key_value, ranges_where


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 500), max_size=40), max_size=12),
       st.sampled_from([1, 7, 50, 1000]))
def test_matches_a_dict(batches, width):
    ix = KeyIndex(width, capacity=4)   # small: the table and the chains grow often
    ref = {}
    # every prefix (and ones past the last, and repeated ones) lists its values by key,
    # after every batch: a chain sorted by a listing gets out of order again
    prefixes = np.r_[np.arange(0, 500 // width + 3), 0, 0]

    def lists_by_key():
        qi, v = ix.within(prefixes)
        assert qi.dtype == np.int64 and v.dtype == np.int32
        assert (np.diff(qi) >= 0).all()
        for q, p in enumerate(prefixes.tolist()):
            expect = [ref[k] for k in sorted(ref) if k // width == p]
            assert v[qi == q].tolist() == expect

    for batch in batches:
        vals, new = ix.insert(np.array(batch, np.int64))
        assert vals.dtype == np.int32 and new.dtype == bool
        for i, k in enumerate(batch):
            if k not in ref:
                assert new[i]
                ref[k] = len(ref)
            else:
                assert not new[i]
            assert vals[i] == ref[k]
        lists_by_key()
    assert len(ix) == len(ref)
    probe = np.arange(-2, 503)
    got = ix.lookup(probe)
    assert all(got[i] == ref.get(int(k), -1) for i, k in enumerate(probe))
    lists_by_key()
    # a filter on the values
    keep = np.arange(len(ref) + 1) % 2 == 0
    qi, v = ix.within(prefixes, keep)
    for q, p in enumerate(prefixes.tolist()):
        expect = [ref[k] for k in sorted(ref) if k // width == p and ref[k] % 2 == 0]
        assert v[qi == q].tolist() == expect
    # a checkpoint gives back the same index
    back = KeyIndex.from_state(ix.state())
    assert back.width == width and len(back) == len(ix)
    assert np.array_equal(back.lookup(probe), got)
    assert np.array_equal(back.within(prefixes)[1], ix.within(prefixes)[1])


def test_compiled_lookups_see_the_same_index():
    ix = KeyIndex(10)
    ix.insert(np.array([35, 31, 7, 39, 30, 12], np.int64))
    assert [key_value(ix.arrays, k) for k in (35, 31, 7, 39, 30, 12, 0, 36)] == \
        [0, 1, 2, 3, 4, 5, -1, -1]
    qi, v = ranges_where(ix.arrays, np.array([3, 0, 1, 9], np.int64), np.zeros(0, bool))
    assert qi.tolist() == [0, 0, 0, 0, 1, 2]
    assert v.tolist() == [4, 1, 0, 3, 2, 5]        # keys 30, 31, 35, 39; 7; 12


def test_old_checkpoints_and_bad_keys():
    # a state saved by the sorted-array index (no width) loads with the width given
    old = {"keys": np.array([3, 8, 21], np.int64), "vals": np.array([2, 0, 1], np.int32),
           "size": 3}
    ix = KeyIndex.from_state(old, 10)
    assert ix.lookup(np.array([8, 21, 3, 4])).tolist() == [0, 1, 2, -1]
    assert ix.within(np.array([0, 2]))[1].tolist() == [2, 0, 1]
    assert ix.state()["vals"].tolist() == [2, 0, 1]
    with pytest.raises(ValueError, match="negative"):
        ix.insert(np.array([-5], np.int64))
    with pytest.raises(ValueError, match="no width"):
        KeyIndex().within(np.array([0]))
    plain = KeyIndex()                   # no prefixes: any int64 but the reserved one
    assert plain.insert(np.array([-5, 2**62, -5], np.int64))[0].tolist() == [0, 1, 0]
    with pytest.raises(ValueError, match="reserved"):
        plain.insert(np.array([np.iinfo(np.int64).min], np.int64))
