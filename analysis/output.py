"""CSV and JSON output, written by the driver (atomically: temp file + rename).

Every metrics CSV is collected to the driver (Arrow) and written here, so a cluster whose
executors do not share the driver's disk still gets whole files; `write_frame` checks the
number of data rows it wrote against the frame. Numbers are formatted as Spark's CSV writer
did (Java's `Double.toString`: `1500.0`, `1.0E-4`, `1.2345678E7`; integers plainly; null
as an empty field), so the files read back to the same values as Spark's own CSVs.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv


class OutputError(RuntimeError):
    """A CSV file does not hold the rows it should."""


def java_double(x: float) -> str:
    """Java's Double.toString of a finite or special double (shortest round-trip digits)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    ax = abs(x)
    if 1e-3 <= ax < 1e7:
        r = repr(x)
        return r if ("." in r or "e" in r) else r + ".0"
    s = np.format_float_scientific(x, unique=True, trim="0", exp_digits=1)
    mant, exp = s.split("e")
    return f"{mant}E{int(exp)}"


def _needs_quotes(s: str) -> bool:
    return s == "" or any(ch in s for ch in ',"\n\r') or s != s.strip()


def _format_column(col: pd.Series) -> list[str]:
    if isinstance(col.dtype, pd.CategoricalDtype):   # format each category once
        names = _format_column(pd.Series(col.cat.categories, dtype=object)) + [""]
        return [names[c] for c in col.cat.codes.to_numpy().tolist()]
    kind = col.dtype.kind
    if kind == "f":
        vals = col.to_numpy(np.float64)
        out = [repr(v) for v in vals.tolist()]      # Java's form inside [1e-3, 1e7)
        mag = np.abs(vals)
        odd = np.flatnonzero(~((mag >= 1e-3) & (mag < 1e7)))
        for i in odd.tolist():
            out[i] = "" if np.isnan(vals[i]) else java_double(float(vals[i]))
        return out
    if kind in "iu" and not col.isna().any():
        return col.astype(str).tolist()
    if kind in "iu":    # nullable Int64 with nulls
        return ["" if v is pd.NA else str(int(v)) for v in col.tolist()]
    if kind == "b":
        return ["true" if v else "false" for v in col.tolist()]
    if len(col) > 64:   # format each distinct value once
        codes, uniques = pd.factorize(col, use_na_sentinel=True)
        names = _format_column(pd.Series(uniques, dtype=object)) + [""]
        return [names[c] for c in codes.tolist()]
    out = []
    for v in col.tolist():
        if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
            out.append("")
        elif isinstance(v, (bool, np.bool_)):
            out.append("true" if v else "false")
        elif isinstance(v, (int, np.integer)):
            out.append(str(int(v)))
        elif isinstance(v, (float, np.floating)):
            out.append(java_double(float(v)))
        else:
            s = str(v)
            out.append('"' + s.replace('"', '\\"') + '"' if _needs_quotes(s) else s)
    return out


def sort_frame(df: pd.DataFrame, order_by: list[str] | None) -> pd.DataFrame:
    """Rows sorted as Spark's ascending sort did (nulls first; strings by code point)."""
    if not order_by or not len(df):
        return df.reset_index(drop=True)
    return df.sort_values(order_by, kind="stable", na_position="first").reset_index(drop=True)


def write_frame(df: pd.DataFrame, path: str | Path, order_by: list[str] | None = None) -> Path:
    """Write `df` (pandas) as one CSV with a header row at `path`, replaced atomically.

    Integer columns holding nulls should be pandas' nullable Int64 (or object) so they print
    as integers. Raises OutputError when the file does not hold len(df) data rows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    df = sort_frame(df, order_by)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    table = _arrow_rows(df)
    if table is not None:      # C++ writer: millions of rows in a second
        tmp.write_text(",".join(df.columns) + "\n")
        with tmp.open("ab") as f:
            pacsv.write_csv(table, f, pacsv.WriteOptions(include_header=False,
                                                         quoting_style="none"))
    else:
        columns = [_format_column(df[c]) for c in df.columns]
        lines = [",".join(df.columns)]
        if columns:
            lines.extend(",".join(row) for row in zip(*columns, strict=True))
        tmp.write_text("\n".join(lines) + "\n")
    with tmp.open("rb") as f:
        written = sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b"")) - 1
    if written != len(df):
        tmp.unlink(missing_ok=True)
        raise OutputError(f"{path}: wrote {written} rows, expected {len(df)}")
    os.replace(tmp, path)
    return path


def _arrow_rows(df: pd.DataFrame):
    """`df` as an Arrow table printing like Spark (floats pre-formatted as Java does,
    integers and text as they are), or None when a text value would need quoting."""
    if not len(df.columns):
        return None
    arrays = {}
    for c in df.columns:
        col = df[c]
        if isinstance(col.dtype, pd.CategoricalDtype) or col.dtype == object:
            arrays[c] = _text_array(col)
            if arrays[c] is None:
                return None
        elif col.dtype.kind == "f":
            texts = _format_column(col)
            arrays[c] = pa.array([t if t else None for t in texts], pa.string())
        elif col.dtype.kind == "b":
            arrays[c] = pa.array(_format_column(col), pa.string())
        else:
            arrays[c] = pa.Array.from_pandas(col)
    return pa.table(arrays)


def _text_array(col: pd.Series):
    """A text column as an Arrow string array ("" and nulls as nulls, which print empty),
    each distinct value formatted once: O(rows) in numpy and Arrow, no Python string per
    row (link_stress.csv has millions of rows of a few traffic names). None when a value
    would need quoting."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes, uniques = col.cat.codes.to_numpy(np.int64), col.cat.categories
    else:
        codes, uniques = pd.factorize(col, use_na_sentinel=True)
    names = _format_column(pd.Series(uniques, dtype=object))
    used = np.unique(codes[codes >= 0]).tolist()
    if any(_needs_quotes(names[i]) and names[i] != "" for i in used):
        return None
    dictionary = pa.array([t if t != "" else None for t in names], pa.string())
    indices = pa.array(np.asarray(codes, np.int32), mask=np.asarray(codes) < 0)
    return pa.DictionaryArray.from_arrays(indices, dictionary).cast(pa.string())


def write_json(obj: dict, path: str | Path) -> Path:
    """Write JSON atomically (temp file + rename); non-finite floats become null."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(_finite(obj), indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path


def _finite(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if hasattr(obj, "item"):   # numpy scalars
        return _finite(obj.item())
    return obj
