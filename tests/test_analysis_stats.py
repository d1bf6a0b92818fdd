"""The driver-side pieces of the analysis without Spark: statistics with Spark's
definitions, order independence, CSV formatting as Spark wrote it, header-only checks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.output import OutputError, java_double, write_frame
from analysis.physical import topology_numbers
from analysis.stats import exact_mean, spark_percentile, unique_rows, with_topology_mean
from topologies import Topology, make_topology


def test_percentile_is_sparks_formula():
    v = [4.0, 1.0, 3.0, 2.0]
    pos = 3 * 0.9          # (n - 1) q, between ranks 2 and 3 (values 3 and 4)
    assert spark_percentile(v, 0.9) == (3 - pos) * 3.0 + (pos - 2) * 4.0
    assert spark_percentile(v, 0.5) == 2.5
    assert spark_percentile([7], 0.98) == 7.0
    assert spark_percentile([np.nan, 2.0], 0.5) == 2.0      # nulls ignored
    assert spark_percentile([], 0.5) is None


def test_means_do_not_depend_on_order():
    rng = np.random.default_rng(1)
    v = rng.random(10_000) * 1e3
    shuffled = rng.permutation(v)
    assert exact_mean(v) == exact_mean(shuffled) == math.fsum(v.tolist()) / len(v)
    assert exact_mean(np.array([1, 2, 2], np.int64)) == 5 / 3
    assert exact_mean([np.nan]) is None


def test_topology_mean_rows():
    per_topo = pd.DataFrame({"topo": [1, 0], "traffic": ["s", "s"], "total": [3, 4],
                             "note": [None, "x"]})
    out = with_topology_mean(per_topo, ["traffic"], ["total"])
    mean = out[out["topo"] == "mean"].iloc[0]
    assert mean["total"] == 3.5 and out["total"].dtype == np.float64
    assert mean["note"] == "x (1 of 2 topologies)"


def test_java_double_formatting():
    assert [java_double(x) for x in (1500.0, 1e-4, 12345678.0, 0.5, 2.0e-3, 1e7)] == [
        "1500.0", "1.0E-4", "1.2345678E7", "0.5", "0.002", "1.0E7"]


def test_write_frame_sorts_and_counts(tmp_path):
    df = pd.DataFrame({"topo": ["mean", "0"], "v": [2.5, 1e-4],
                       "n": pd.Series([None, 3], dtype="Int64"), "s": ["a", None]})
    path = write_frame(df, tmp_path / "x.csv", ["topo"])
    assert path.read_text() == "topo,v,n,s\n0,1.0E-4,3,\nmean,2.5,,a\n"
    quoted = write_frame(pd.DataFrame({"s": ["a,b"]}), tmp_path / "q.csv")
    assert quoted.read_text() == 's\n"a,b"\n'
    assert write_frame(df.iloc[:0], tmp_path / "e.csv").read_text() == "topo,v,n,s\n"
    with pytest.raises(OutputError, match="wrote 2 rows, expected 1"):
        write_frame(pd.DataFrame({"s": ["two\nlines"]}), tmp_path / "bad.csv")


def test_unique_rows_lexicographic():
    a, b = unique_rows(np.array([2, 1, 2, 1]), np.array([0, 5, 0, 3]))
    assert a.tolist() == [1, 1, 2] and b.tolist() == [3, 5, 0]


def test_topology_numbers_from_headers(tmp_path):
    topo = make_topology("ts600", 1, 50)
    topo.save(tmp_path / "topo-0.npz")
    assert topology_numbers(tmp_path / "topo-0.npz") == {
        "n_links": topo.n_links, "n_hosts": 50, "lan_base": topo.n_links - 100,
        "has_paths": True}
    Topology.from_latency_matrix(np.array([[0, 5], [5, 0]]), [0, 1, 1]).save(
        tmp_path / "topo-1.npz")
    assert topology_numbers(tmp_path / "topo-1.npz")["has_paths"] is False


def test_unique_rows_and_sorted_unique_match_numpy():
    """The one-sort versions give numpy's answer, empty and overflowing inputs included."""
    from analysis.stats import sorted_unique
    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 5000):
        a, b, c = rng.integers(0, 40, n), rng.integers(0, 5, n), rng.integers(0, 900, n)
        want = np.unique(np.stack([a, b, c], axis=1), axis=0) if n else np.zeros((0, 3))
        got = unique_rows(a, b, c)
        assert all(g.dtype == np.int64 for g in got)
        assert all(np.array_equal(g, want[:, i]) for i, g in enumerate(got))
        values, counts = sorted_unique(a, return_counts=True)
        ref_values, ref_counts = np.unique(a, return_counts=True)
        assert np.array_equal(values, ref_values) and np.array_equal(counts, ref_counts)
    big = np.array([2**40, 1, 2**40])          # 2**40 x 2**40 does not fit 63 bits
    assert [x.tolist() for x in unique_rows(big, big)] == [[1, 2**40], [1, 2**40]]


def test_node_stress_counts_split_by_group_buckets_add_up():
    """parent_counts over any split of whole groups, added up by fill_nodes, gives the
    counts of the whole edge list: duplicates (snapshots) once, zeros for other nodes."""
    from analysis.node_stress import fill_nodes, parent_counts
    rng = np.random.default_rng(5)
    n = 4000
    edges = pd.DataFrame({"topo": 0, "variant": rng.choice(["scribe", "collapsed"], n),
                          "group": rng.integers(0, 60, n), "parent": rng.integers(0, 50, n),
                          "child": rng.integers(0, 50, n)})
    edges = pd.concat([edges, edges.iloc[:1000]], ignore_index=True)  # a second snapshot
    nodes = pd.DataFrame({"topo": 0, "node": np.arange(55), "is_host": True})
    whole = fill_nodes(parent_counts(edges), nodes)
    split = fill_nodes(pd.concat([parent_counts(edges[edges["group"] % 3 == b]
                                                .reset_index(drop=True)) for b in range(3)],
                                 ignore_index=True), nodes)
    pd.testing.assert_frame_equal(whole, split)
    distinct = edges.drop_duplicates()
    for variant in ("scribe", "collapsed"):
        d = distinct[distinct["variant"] == variant]
        got = whole[whole["variant"] == variant].set_index("node")
        assert len(got) == 55
        assert (got["children_entries"] == d.groupby("parent").size()
                .reindex(range(55), fill_value=0)).all()
        assert (got["children_tables"] == d.drop_duplicates(["group", "parent"])
                .groupby("parent").size().reindex(range(55), fill_value=0)).all()


def test_variant_codes_round_trip_names_no_one_listed():
    """Rows coded by `variant_columns` (a code for the listed variants, the name for any
    other) decode to the names they had; a `variant` column of names works as well."""
    from analysis.schema import VARIANTS
    from analysis.variants import variant_codes, variant_names
    names = np.array(["collapsed", "scribe", "my_policy", "scribe", "bottleneck"], object)
    code = [float(VARIANTS.index(n)) if n in VARIANTS else np.nan for n in names]
    coded = pd.DataFrame({"variant_code": code,
                          "variant_name": [None if n in VARIANTS else n for n in names]})
    assert variant_names(coded).tolist() == names.tolist()
    none = pd.DataFrame({"variant_code": [np.nan, 0.0], "variant_name": [None, None]})
    assert variant_names(none).tolist() == [None, "scribe"]
    assert variant_names(pd.DataFrame({"variant": names})).tolist() == names.tolist()
    listed = coded[coded["variant_code"].notna()].astype({"variant_code": "int32"})
    codes, table = variant_codes(listed)
    assert table.tolist() == list(VARIANTS) and table[codes].tolist() == names[
        [0, 1, 3, 4]].tolist()
