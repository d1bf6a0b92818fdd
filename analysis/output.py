"""Single-file CSV output from Spark, and atomic JSON writes.

Spark writes a directory of part files; we coalesce to one partition, write next to the
target, then move the single part file to its stable name, so a reader never sees a
half-written CSV.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

from pyspark.sql import DataFrame


def write_csv(df: DataFrame, path: str | Path, order_by: list[str] | None = None) -> Path:
    """Write `df` as one CSV file with a header row at `path` (replaced atomically)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.stem}-", dir=path.parent))
    try:
        # one shuffle into a single sorted partition: a global orderBy would add a sampling
        # job per file, and coalesce(1) would pull the upstream work into one task
        out = df.repartition(1)
        if order_by:
            out = out.sortWithinPartitions(*order_by)
        out.write.mode("overwrite").option("header", True).csv(str(tmp / "csv"))
        parts = sorted((tmp / "csv").glob("part-*.csv"))
        staged = tmp / path.name
        if parts and parts[0].stat().st_size > 0:
            shutil.move(parts[0], staged)
        else:   # an empty DataFrame may produce no part file: still give the header
            staged.write_text(",".join(df.columns) + "\n")
        os.replace(staged, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


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
