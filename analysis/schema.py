"""Event-log schema and analysis defaults, mirroring docs/ARCHITECTURE.md ("Event logs").

`analysis/` never imports `actors/`, so the Scribe type codes that select multicast traffic
are repeated here; scenarios may pass their own selections to `run_analysis`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# Spark DDL type of every column, per event table (without `topo`, which the driver adds
# as the partition column and which `load` always casts to int).
EVENT_TABLES: dict[str, dict[str, str]] = {
    "message": {"phase": "string", "time": "bigint", "arrival": "bigint", "type": "smallint",
                "src": "int", "dst": "int", "group": "int"},
    "route": {"phase": "string", "origin": "int", "root": "int", "type": "smallint",
              "start": "bigint", "end": "bigint", "hops": "smallint", "path_us": "bigint"},
    "delivery": {"phase": "string", "group": "int", "member": "int", "source": "int",
                 "publish_time": "bigint", "time": "bigint", "hops": "smallint",
                 "seqno": "bigint", "variant": "string"},
    "tree_edge": {"phase": "string", "group": "int", "parent": "int", "child": "int",
                  "variant": "string"},
    "group": {"phase": "string", "group": "int", "rank": "int", "size": "int", "rp": "int",
              "creator": "int", "id_hex": "string"},
    "membership": {"phase": "string", "group": "int", "member": "int"},
    "probe": {"phase": "string", "node": "int", "target": "int", "group": "int",
              "time": "bigint"},
    "refused": {"phase": "string", "group": "int", "node": "int", "op": "string",
                "time": "bigint"},
    "host": {"phase": "string", "node": "int", "router": "int", "id_hex": "string"},
}

# Scribe type codes (actors/scribe/types.py).
SCRIBE_JOIN = 61
SCRIBE_MCAST = 66   # source -> RP (no hop when the source is the RP, as in the experiments)
SCRIBE_DATA = 68    # tree dissemination

TYPE_NAMES: dict[int, str] = {
    50: "scribe_create_req", 51: "scribe_join_req", 52: "scribe_leave_req",
    53: "scribe_mcast_req", 54: "scribe_collapse_req", 60: "scribe_create",
    61: "scribe_join", 62: "scribe_join_ack", 63: "scribe_join_refuse", 64: "scribe_leave",
    65: "scribe_rejoin", 66: "scribe_mcast", 67: "scribe_rp_addr", 68: "scribe_data",
    70: "scribe_collapse_wave", 71: "scribe_adopt",
}


def type_name(code: int, names: dict[int, str] | None = None) -> str:
    """Readable name of a message type code; unknown codes get a range-based name."""
    table = {**TYPE_NAMES, **(names or {})}
    if code in table:
        return table[code]
    if 0 <= code <= 9:
        return f"engine_{code}"
    if 10 <= code <= 49:
        return f"pastry_{code}"
    if 50 <= code <= 89:
        return f"scribe_{code}"
    if 90 <= code <= 109:
        return f"reliable_{code}"
    return f"type_{code}"


@dataclass(frozen=True)
class Traffic:
    """A selection of `message` rows whose hops are one traffic pattern for link stress.

    label: name in the CSVs / summary (a Scribe variant such as "scribe", or "scribe_join");
    phases: phase names the rows must have; types: message type codes.
    """

    label: str
    phases: tuple[str, ...]
    types: tuple[int, ...]


# Default selections: one message multicast to every group, per tree variant, each variant's
# multicast in its own phase (message rows carry no variant column); plus the JOIN traffic
# that built the plain trees ("join link stress equals multicast link stress by symmetry").
DEFAULT_TRAFFIC: tuple[Traffic, ...] = (
    Traffic("scribe", ("multicast",), (SCRIBE_MCAST, SCRIBE_DATA)),
    Traffic("collapsed", ("multicast_collapsed",), (SCRIBE_MCAST, SCRIBE_DATA)),
    Traffic("bottleneck", ("multicast_bottleneck",), (SCRIBE_MCAST, SCRIBE_DATA)),
    Traffic("scribe_join", ("join",), (SCRIBE_JOIN,)),
)

VARIANTS: tuple[str, ...] = ("scribe", "collapsed", "bottleneck")
BASELINES: tuple[str, ...] = ("ip_multicast", "naive_unicast")


@dataclass(frozen=True)
class AnalysisOptions:
    """What to select from the logs; scenarios override the defaults when they differ."""

    traffic: tuple[Traffic, ...] = DEFAULT_TRAFFIC
    type_names: dict[int, str] = field(default_factory=dict)
    primary_variant: str = "scribe"   # the variant summary.json's top-level figures describe
    # reader(path) -> topology for RUN_DIR/topology/topo-<t>.npz; None = Topology.load.
    # Runs in Spark workers: must be a picklable module-level function.
    topology_reader: Callable | None = None
