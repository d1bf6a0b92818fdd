"""Tree-variant names as small int codes on Spark's side of a grouped map.

The `variant` column of `tree_edge` and `delivery` is a string. Through a shuffle, a sort
and the JVM's Arrow hand-over to Python, millions of strings cost more than the numpy work
they feed (3.0 M tree edges of `small_groups_30k` to an empty grouped map: 2.5 s warm with
the string, 1.8 s with an int code). `variant_columns` turns the column into a code (its
index in `analysis.schema.VARIANTS`) plus the name only where it has no code, so a variant
no one listed still travels, and `variant_codes` turns them back on the Python side.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import Column
from pyspark.sql import functions as F

from analysis.schema import VARIANTS

CODE, NAME = "variant_code", "variant_name"


def variant_columns(variant: Column) -> list[Column]:
    """`variant` as `variant_code` (its index in VARIANTS, null for any other name) and
    `variant_name` (the name where there is no code, else null)."""
    code = None
    for i, name in enumerate(VARIANTS):
        hit = variant == F.lit(name)
        code = F.when(hit, F.lit(i)) if code is None else code.when(hit, F.lit(i))
    return [code.alias(CODE), F.when(code.isNull(), variant).alias(NAME)]


def variant_codes(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(codes, names) of the rows' variants (names[codes] is each row's name; code -1: no
    variant, a null), from `variant_columns`' two columns or from a `variant` column of
    names. O(n)."""
    if "variant" in rows:
        codes, names = pd.factorize(rows["variant"], sort=True)
        return np.asarray(codes, np.int64), np.asarray(names, object)
    code = pd.to_numeric(rows[CODE]).to_numpy(np.float64, na_value=np.nan)
    known = ~np.isnan(code)
    if known.all():
        return code.astype(np.int64), np.asarray(VARIANTS, object)
    values = np.asarray(VARIANTS, object)[np.where(known, code, 0).astype(np.int64)]
    values[~known] = rows[NAME].to_numpy(object)[~known]
    codes, names = pd.factorize(values, sort=True)
    return np.asarray(codes, np.int64), np.asarray(names, object)


def variant_names(rows: pd.DataFrame) -> np.ndarray:
    """Each row's variant name (object array; None where it has none). O(n)."""
    codes, names = variant_codes(rows)
    out = np.asarray(names, object)[np.maximum(codes, 0)] if len(names) else np.full(
        len(codes), None, object)
    out[codes < 0] = None
    return out
