"""Distribution statistics in numpy with Spark's definitions, independent of row order.

The analysis computes its per-row work in Spark tasks and its summaries on the driver from
the collected detail tables, with these functions:
- percentiles are exact, with the formula of Spark's `percentile` aggregate (linear
  interpolation between the two closest ranks, `(hi - pos) * v[lo] + (pos - lo) * v[hi]`);
- means are `fsum(values) / n`: the correctly rounded sum does not depend on the order of
  the rows (Spark's `avg` of doubles adds in partition order, so its last bits did);
  integer sums are exact (int64) before the one division, as Spark's avg of integers;
- nulls (NaN) are ignored, as Spark's aggregates ignore nulls; no value gives None.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def _present(values) -> np.ndarray:
    a = np.asarray(values)
    if a.dtype.kind == "f":
        return a[~np.isnan(a)]
    if a.dtype == object:
        return np.asarray([v for v in a if v is not None and not pd.isna(v)], dtype=np.float64)
    return a


def exact_mean(values) -> float | None:
    """Mean of the non-null values (None when there is none), independent of their order."""
    a = _present(values)
    if len(a) == 0:
        return None
    if a.dtype.kind in "iub":
        return float(int(a.astype(np.int64).sum())) / len(a)
    return math.fsum(a.tolist()) / len(a)


def spark_percentile(values, q: float) -> float | None:
    """Spark's exact `percentile(col, q)` of the non-null values (None when empty)."""
    a = np.sort(_present(values).astype(np.float64))
    n = len(a)
    if n == 0:
        return None
    pos = float(n - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi or a[lo] == a[hi]:
        return float(a[lo])
    return float((hi - pos) * a[lo] + (pos - lo) * a[hi])


def spark_max(values) -> float | None:
    a = _present(values)
    return float(a.max()) if len(a) else None


def distribution(values, prefix: str, percentiles: dict[str, float] | None = None) -> dict:
    """{prefix_mean, prefix_median, prefix_max, prefix_<name>...} like the Spark version:
    mean/median/max, then the named percentiles."""
    out = {f"{prefix}_mean": exact_mean(values),
           f"{prefix}_median": spark_percentile(values, 0.5),
           f"{prefix}_max": spark_max(values)}
    for name, q in (percentiles or {}).items():
        out[f"{prefix}_{name}"] = spark_percentile(values, q)
    return out


def pack_keys(columns) -> tuple[np.ndarray, list[int]]:
    """One int64 per row whose order is the lexicographic order of the (non-negative
    integer) columns, so one sort replaces slow row-wise (axis=0) calls; and the width of
    each column's digit (to unpack it). Raises OverflowError when the value ranges do not
    fit 63 bits."""
    key = np.zeros(len(columns[0]), np.int64)
    span = 1
    widths = []
    for col in columns:
        col = np.asarray(col, np.int64)
        if len(col) and col.min() < 0:
            raise OverflowError("pack_keys needs non-negative values")
        width = int(col.max()) + 1 if len(col) else 1
        span *= width
        if span >= 2**63:
            raise OverflowError("pack_keys: value ranges exceed 63 bits")
        key = key * width + col
        widths.append(width)
    return key, widths


def unique_rows(*columns: np.ndarray) -> tuple[np.ndarray, ...]:
    """The distinct rows of the integer columns (int64), sorted lexicographically.
    O(n log n): one sort of the packed keys, whose digits give the columns back."""
    try:
        key, widths = pack_keys(columns)
    except OverflowError:
        rows = np.unique(np.stack([np.asarray(c, np.int64) for c in columns], axis=1), axis=0)
        return tuple(rows[:, i] for i in range(len(columns)))
    key = sorted_unique(key)
    out = []
    for width in reversed(widths[1:]):
        key, digit = np.divmod(key, width)
        out.append(digit)
    out.append(key)
    return tuple(reversed(out))


def sorted_unique(values: np.ndarray, return_counts: bool = False):
    """np.unique of a 1-d array by one sort (O(n log n)): numpy 2's hash-based unique is
    several times slower on the analysis' millions of packed int64 keys. With `return_counts`, also
    the number of occurrences of each value (int64)."""
    v = np.sort(np.asarray(values))
    first = np.r_[True, v[1:] != v[:-1]] if len(v) else np.zeros(0, bool)
    if not return_counts:
        return v[first]
    starts = np.flatnonzero(first)
    return v[starts], np.diff(np.r_[starts, len(v)]).astype(np.int64)


def group_fsum(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Correctly rounded sum of `values` per run of equal `keys` (keys sorted); one entry per
    run, in order. O(n) Python-level work per group run, fine for per-group figures."""
    if len(keys) == 0:
        return np.zeros(0, np.float64)
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[starts[1:], len(keys)]
    vals = values.tolist()
    return np.fromiter((math.fsum(vals[s:e]) for s, e in zip(starts, ends, strict=True)),
                       np.float64, count=len(starts))


def with_topology_mean(per_topo: pd.DataFrame, keys: list[str],
                       numeric: list[str]) -> pd.DataFrame:
    """Per-topology summary rows plus one row per `keys` with topo = "mean".

    The mean row averages each numeric column over the topologies that have a value
    (`exact_mean`); every numeric column becomes double (as Spark's union with the mean
    did). Other columns (e.g. `note`) of the mean row: the value when all topologies agree,
    null when none has one, else "<value> (k of n topologies)" for the first in sort order.
    `topo` becomes a string ("0", "1", ..., "mean").
    """
    out = per_topo.copy()
    out["topo"] = out["topo"].astype(str)
    for c in numeric:
        out[c] = out[c].astype("float64")
    others = [c for c in per_topo.columns if c not in keys and c != "topo" and c not in numeric]
    rows = []
    if len(per_topo):
        for key, part in per_topo.groupby(keys, sort=True, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            row = {"topo": "mean", **dict(zip(keys, key, strict=True))}
            for c in numeric:
                row[c] = exact_mean(part[c].to_numpy(dtype=np.float64, na_value=np.nan))
            for c in others:
                row[c] = _agreed(part[c].tolist())
            rows.append(row)
    mean = pd.DataFrame(rows, columns=out.columns)
    for c in numeric:
        mean[c] = mean[c].astype("float64")
    return pd.concat([out, mean], ignore_index=True) if rows else out


def _agreed(values: list):
    present = [v for v in values if v is not None and not (isinstance(v, float) and
                                                          math.isnan(v))]
    if not present:
        return None
    distinct = sorted(set(present))
    if len(distinct) == 1 and len(present) == len(values):
        return distinct[0]
    return f"{distinct[0]} ({len([v for v in present if v == distinct[0]])} of " \
           f"{len(values)} topologies)"
