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
