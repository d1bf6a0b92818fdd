"""128-bit id helpers against Python big integers (exact arithmetic)."""

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.pastry import ids as I

u128 = st.integers(min_value=0, max_value=2**128 - 1)


def test_node_ids_are_sha1_prefixes_and_deterministic():
    hi, lo = I.node_ids(5, seed=7)
    want = int.from_bytes(hashlib.sha1(b"node:7:3").digest()[:16], "big")
    assert I.to_int(hi[3], lo[3]) == [want]
    hi2, lo2 = I.node_ids(5, seed=7)
    assert (hi == hi2).all() and (lo == lo2).all()
    hi3, _ = I.node_ids(5, seed=8)
    assert (hi != hi3).any()


@settings(max_examples=200, deadline=None)
@given(a=u128, b=u128)
def test_arithmetic_matches_big_ints(a, b):
    ah, al = I.from_int([a])
    bh, bl = I.from_int([b])
    assert I.to_int(*I.sub(ah, al, bh, bl)) == [(a - b) % 2**128]
    assert bool(I.less(ah, al, bh, bl)[0]) == (a < b)
    d = min((a - b) % 2**128, (b - a) % 2**128)
    assert I.to_int(*I.ring_dist(ah, al, bh, bl)) == [d]
    x = a ^ b
    spl = 32 if x == 0 else (128 - x.bit_length()) // 4
    assert int(I.shared_prefix_len(ah, al, bh, bl, 4)[0]) == spl
    expect = 128 if x == 0 else 128 - x.bit_length()
    assert int(I.shared_prefix_len(ah, al, bh, bl, 1)[0]) == expect


@settings(max_examples=100, deadline=None)
@given(a=u128, pos=st.integers(0, 31))
def test_digits(a, pos):
    h, l = I.from_int([a])
    assert int(I.digit(h, l, pos, 4)[0]) == (a >> (124 - 4 * pos)) & 15
    assert int(I.digit(h, l, pos // 2, 8)[0]) == (a >> (120 - 8 * (pos // 2))) & 255


def test_bad_b_is_rejected():
    with pytest.raises(ValueError, match="digit width"):
        I.digit(np.uint64(1), np.uint64(1), 0, b=3)


@settings(max_examples=50, deadline=None)
@given(nodes=st.lists(u128, min_size=1, max_size=30, unique=True),
       keys=st.lists(u128, min_size=1, max_size=10))
def test_closest_node_brute_force(nodes, keys):
    hi, lo = I.from_int(nodes)
    order = I.sorted_order(hi, lo)
    got = I.closest_node(hi[order], lo[order], order, *I.from_int(keys))
    for k, g in zip(keys, got, strict=True):
        best = min(range(len(nodes)),
                   key=lambda i: (min((nodes[i] - k) % 2**128, (k - nodes[i]) % 2**128), nodes[i]))
        assert g == best


def test_near_wraparound_and_high_bits():
    # ids that differ only in bits a float64 cannot hold
    vals = [2**128 - 1, 0, 2**127, 2**127 + 1, 2**64 - 1, 2**64]
    hi, lo = I.from_int(vals)
    order = I.sorted_order(hi, lo)
    assert [vals[i] for i in order] == sorted(vals)
    k = I.from_int([2**128 - 2])
    assert I.closest_node(hi[order], lo[order], order, *k)[0] == 0
    k = I.from_int([2**127 + 1])
    assert I.closest_node(hi[order], lo[order], order, *k)[0] == 3
