"""How far apart the topologies (or seeds) of a run are: std and 95 % CI of each mean figure.

The published figures average 10 transit-stub topologies, and so do the `mean` rows of our
`*_summary.csv` files. Here, from the per-topology rows of those files (pandas, no Spark):
the sample standard deviation across topologies (ddof = 1) and a 95 % confidence interval
for the mean (Student t with n - 1 degrees of freedom: mean +- t * std / sqrt(n)).

`add_spread(metrics_dir)` appends `<figure>_std`, `<figure>_ci95_low`, `<figure>_ci95_high`
to each summary CSV (filled on the `mean` rows only; empty with one topology) and returns
the `spread` entry of summary.json, whose leaves mirror the summary's own keys.
Existing columns keep their exact text: the files are read and rewritten as strings.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

CONFIDENCE = 0.95
SUFFIXES = ("std", "ci95_low", "ci95_high")
METHOD = ("across topologies: sample standard deviation (ddof=1); 95 % confidence interval "
          "of the mean, Student t with n-1 degrees of freedom")
ONE_SAMPLE = ("one topology: every figure is a single sample, no spread can be given "
              "(run with --topologies N or --seeds A..B)")

# summary CSV -> (key columns, summary.json section, {CSV column: path under the key})
_NS = {f"{c}_{s}": (m, s) for c, m in (("tables", "children_tables"),
                                       ("entries", "children_entries"))
       for s in ("mean", "median", "max")}
LAYOUT: dict[str, tuple[list[str], str, dict[str, tuple[str, ...]]]] = {
    "delay_penalty_summary.csv": (["variant"], "delay_penalty_by_variant", {
        "groups": ("groups",),
        **{f"{m}_{s}": (m, "p50" if s == "median" else s)
           for m in ("rad", "rmd") for s in ("mean", "median", "p90", "max")}}),
    "rdp_rank1_summary.csv": (["variant"], "rdp_rank1_by_variant", {
        c: (c,) for c in ("members", "mean", "median", "max", "p80", "p98", "frac_below_1")}),
    "node_stress_summary.csv": (["variant", "population"], "node_stress", {
        "nodes": ("nodes",), **_NS}),
    "link_stress_summary.csv": (["traffic"], "link_stress", {
        c: (c,) for c in ("total", "mean", "median", "max", "links", "links_nonzero",
                          "mean_all_links")}),
    "churn_summary.csv": (["variant"], "churn", {}),   # {}: every figure column, same name
}


def t_interval(values, mean: float | None = None) -> dict:
    """{"n", "mean", "std", "ci95_low", "ci95_high"} of the finite `values`.

    mean: the centre to use (e.g. Spark's own average, so the interval is centred on the
    figure summary.json reports); default numpy's mean. std and the interval are None when
    there are fewer than two values."""
    v = np.asarray([x for x in values if x is not None], dtype=float)
    v = v[np.isfinite(v)]
    n = len(v)
    centre = float(np.mean(v)) if mean is None and n else mean
    out = {"n": n, "mean": centre, "std": None, "ci95_low": None, "ci95_high": None}
    if n >= 2:
        from scipy import stats  # ~1 s to import: not for the report/compare commands
        std = float(np.std(v, ddof=1))
        half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * std / math.sqrt(n)
        out.update(std=std, ci95_low=centre - half, ci95_high=centre + half)
    return out


def _numbers(col: pd.Series) -> pd.Series:
    return pd.to_numeric(col.where(col != ""), errors="coerce")   # "" -> NaN, no downcast


TEXT_COLUMNS = {"note", "publishes_from"}


def figure_columns(table: pd.DataFrame, keys: list[str], names: list[str] | None = None,
                   ) -> list[str]:
    """The columns of a summary table that get a spread: `names` (the file's documented
    figures) when given, else every column but topo, the keys and the text columns.
    Fixed by the file, not by its values, so the CSV schema never depends on the data."""
    if names:
        return [c for c in table.columns if c in names]   # in the file's order
    return [c for c in table.columns if c != "topo" and c not in keys and c not in TEXT_COLUMNS]


def with_spread(table: pd.DataFrame, keys: list[str], names: list[str] | None = None,
                ) -> tuple[pd.DataFrame, dict]:
    """The summary table (strings, as read from its CSV) with the spread columns appended
    for the figure columns (`names`, else all but keys and text), and
    {(key values): {column: t_interval(...)}} for its `mean` rows."""
    table = table.copy()
    columns = figure_columns(table, keys, names)
    per_topo = table[table["topo"] != "mean"]
    found: dict[tuple, dict] = {}
    new = {f"{c}_{s}": [""] * len(table) for c in columns for s in SUFFIXES}
    for pos, (_, row) in enumerate(table.iterrows()):
        if row["topo"] != "mean":
            continue
        key = tuple(row[k] for k in keys)
        mine = per_topo
        for k, val in zip(keys, key, strict=True):
            mine = mine[mine[k] == val]
        found[key] = {}
        for c in columns:
            centre = _numbers(pd.Series([row[c]])).iloc[0]
            iv = t_interval(_numbers(mine[c]).tolist(),
                            None if pd.isna(centre) else float(centre))
            found[key][c] = iv
            for s in SUFFIXES:
                new[f"{c}_{s}"][pos] = "" if iv[s] is None else repr(iv[s])
    for name, vals in new.items():
        table[name] = vals
    return table, found


def _read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _write(table: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.spread.tmp")
    table.to_csv(tmp, index=False)
    os.replace(tmp, path)


def _put(tree: dict, path: tuple[str, ...], leaf: dict) -> None:
    for k in path[:-1]:
        tree = tree.setdefault(k, {})
    tree[path[-1]] = leaf


def _json_path(name: str, key: tuple, column: str) -> tuple[str, ...] | None:
    keys, section, columns = LAYOUT[name]
    if columns and column not in columns:
        return None
    tail = columns.get(column, (column,))
    head = (section, key[0])
    if name == "node_stress_summary.csv" and key[1] == "tree_nodes":
        head += ("tree_nodes",)
    return head + tail


def add_spread(metrics_dir: str | Path) -> dict:
    """Append the spread columns to every summary CSV of `metrics_dir` that exists, and
    return summary.json's `spread` entry: {"samples", "confidence", "method"} and, with
    several topologies, the std / ci95_low / ci95_high of each figure at the summary's own
    key path (e.g. spread["delay_penalty_by_variant"]["scribe"]["rad"]["p50"])."""
    metrics_dir = Path(metrics_dir)
    tree: dict = {}
    samples = 0
    for name, (keys, _, names) in LAYOUT.items():
        path = metrics_dir / name
        if not path.is_file():
            continue
        table = _read(path)
        if "topo" not in table.columns or not all(k in table.columns for k in keys):
            continue
        table = table[[c for c in table.columns
                       if not c.endswith(tuple(f"_{s}" for s in SUFFIXES))]]
        table, found = with_spread(table, keys, list(names))
        _write(table, path)
        samples = max(samples, table.loc[table["topo"] != "mean", "topo"].nunique())
        for key, by_column in found.items():
            for column, iv in by_column.items():
                jpath = _json_path(name, key, column)
                if jpath is not None and iv["n"] >= 2:
                    _put(tree, jpath, {s: iv[s] for s in SUFFIXES} | {"n": iv["n"]})
    head = {"samples": samples, "confidence": CONFIDENCE, "method": METHOD}
    if samples < 2:
        head["note"] = ONE_SAMPLE
    return {**head, **tree}


def spread_at(summary: dict, path: tuple[str, ...]) -> dict | None:
    """The {"std", "ci95_low", "ci95_high", "n"} entry of a figure at summary.json key
    `path` (e.g. ("link_stress", "scribe", "total")), or None."""
    node = summary.get("spread")
    for k in path:
        if not isinstance(node, dict) or k not in node:
            return None
        node = node[k]
    return node if isinstance(node, dict) and "std" in node else None

