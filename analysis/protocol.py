"""What the analysis knows of the protocols: read from the run, never copied from actors/.

A run writes the message type table of the protocols it ran (`events/message_type`: type
code, name; the engine writes it from each protocol's declared names) and its resolved
configuration (`config.toml`, with `[pastry] b`). The analysis selects traffic by type
*name* ("scribe_data") and resolves the names to this run's codes, and takes Pastry's
digit base 2^b from the run's own configuration, so a protocol that renumbers its types or
a run with another b is analysed correctly without editing analysis/.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

# names of the Scribe types the analysis selects by default (actors/scribe/types.py
# TYPE_NAMES; resolved to codes through the run's type table)
SCRIBE_CREATE = "scribe_create"
SCRIBE_JOIN = "scribe_join"
SCRIBE_MCAST = "scribe_mcast"   # source -> RP (no hop when the source is the RP)
SCRIBE_DATA = "scribe_data"     # tree dissemination


@dataclass(frozen=True)
class RunProtocol:
    """The protocol facts of one run: its type table and Pastry's digit bits `b`.

    names: type code -> name (when topologies disagree on a code's name, the smallest name,
    so the result does not depend on which topology was read first); pastry_b: None when
    the run directory has no config.toml with `[pastry] b` (hand-made logs).
    """

    names: dict[int, str]
    pastry_b: int | None = None

    def code(self, name: str) -> int | None:
        """The code this run gives type `name` (the smallest one if several), else None."""
        codes = [c for c, n in self.names.items() if n == name]
        return min(codes) if codes else None

    def codes(self, types) -> tuple[int, ...]:
        """Type codes of a selection given as codes and/or names; names this run does not
        have select nothing (a run without that protocol has no such traffic)."""
        out = []
        for t in types:
            code = self.code(t) if isinstance(t, str) else int(t)
            if code is not None:
                out.append(code)
        return tuple(out)

    @property
    def routing_base(self) -> int | None:
        """Pastry's digit base 2^b (a route takes about log_{2^b} N hops)."""
        return None if self.pastry_b is None else 2 ** self.pastry_b

    def type_frame(self) -> pd.DataFrame:
        """The type table as (type, name) rows, for the CSVs' type_name columns."""
        codes = sorted(self.names)
        return pd.DataFrame({"type": pd.Series(codes, dtype="int64"),
                             "name": pd.Series([self.names[c] for c in codes], dtype=object)})


def pastry_b(run_dir: str | Path) -> int | None:
    """`[pastry] b` of RUN_DIR/config.toml (the run's resolved configuration), else None."""
    path = Path(run_dir) / "config.toml"
    if not path.is_file():
        return None
    try:
        config = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML ({exc})") from exc
    b = (config.get("pastry") or {}).get("b")
    if b is None:
        return None
    if not isinstance(b, int) or isinstance(b, bool) or b < 1:
        raise ValueError(f"{path}: pastry.b must be a positive integer, got {b!r}")
    return b
