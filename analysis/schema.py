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
    # reliable layer (issue 22): every copy the tree brings a member, before hold-back and
    # duplicate removal (`delivery` is then what the layer releases to the application)
    "arrival": {"phase": "string", "group": "int", "member": "int", "source": "int",
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
    "message_type": {"phase": "string", "type": "smallint", "name": "string"},
    # churn scenarios (written by the scenario runner, docs/analysis.md "Churn")
    "publish": {"phase": "string", "group": "int", "source": "int", "time": "bigint",
                "variant": "string"},
    "node_event": {"phase": "string", "node": "int", "time": "bigint", "event": "string"},
}


def table_ddl(table: str) -> str:
    """Spark DDL schema of an event table, `topo int` (the partition column) last."""
    return ", ".join(f"`{c}` {t}" for c, t in {**EVENT_TABLES[table], "topo": "int"}.items())


# Arrow types of the Spark DDL names used above (the Parquet files the shards write).
ARROW_TYPES: dict[str, str] = {"string": "string", "bigint": "int64", "int": "int32",
                               "smallint": "int16"}

# Scribe type codes (actors/scribe/types.py).
SCRIBE_JOIN = 61
SCRIBE_MCAST = 66   # source -> RP (no hop when the source is the RP, as in the experiments)
SCRIBE_DATA = 68    # tree dissemination

# Fallback names of message type codes when a run has no `message_type` table. Copied from
# actors/pastry/types.py and actors/scribe/types.py (analysis may not import actors/);
# test_analysis_schema.py checks the copy against the originals.
PASTRY_TYPE_NAMES: dict[int, str] = {
    10: "pastry_join_start", 11: "pastry_join_req", 12: "pastry_join", 13: "pastry_join_rows",
    14: "pastry_join_leafs", 15: "pastry_join_nbrs", 16: "pastry_announce",
    17: "pastry_join_done", 20: "pastry_keepalive", 21: "pastry_ka_timer",
    22: "pastry_leaf_req", 23: "pastry_leaf_reply", 24: "pastry_row_req",
    25: "pastry_row_reply", 26: "pastry_hop_ack", 27: "pastry_ack_timer",
    28: "pastry_leaf_refresh", 29: "pastry_leaf_lookup", 30: "pastry_rows_req",
    31: "pastry_rows_reply",
}
SCRIBE_TYPE_NAMES: dict[int, str] = {
    50: "scribe_create_req", 51: "scribe_join_req", 52: "scribe_leave_req",
    53: "scribe_mcast_req", 54: "scribe_collapse_req", 60: "scribe_create",
    61: "scribe_join", 62: "scribe_join_ack", 63: "scribe_join_refuse", 64: "scribe_leave",
    65: "scribe_rejoin", 66: "scribe_mcast", 67: "scribe_rp_addr", 68: "scribe_data",
    70: "scribe_collapse_wave", 71: "scribe_adopt", 72: "scribe_bn_sibling",
    73: "scribe_bn_join", 80: "scribe_tick", 81: "scribe_heartbeat", 82: "scribe_refresh",
    83: "scribe_replica", 84: "scribe_replica_data",
}
TYPE_NAMES: dict[int, str] = {**PASTRY_TYPE_NAMES, **SCRIBE_TYPE_NAMES}

# code ranges of docs/ARCHITECTURE.md, for codes no table names: (low, high, prefix)
TYPE_RANGES: tuple[tuple[int, int, str], ...] = (
    (0, 9, "engine"), (10, 49, "pastry"), (50, 89, "scribe"), (90, 109, "reliable"))


def type_name(code: int, names: dict[int, str] | None = None) -> str:
    """Readable name of a message type code; unknown codes get a range-based name."""
    table = {**TYPE_NAMES, **(names or {})}
    if code in table:
        return table[code]
    for low, high, prefix in TYPE_RANGES:
        if low <= code <= high:
            return f"{prefix}_{code}"
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
    # churn metrics: phases of the publish/delivery rows of the multicast stream (None: all)
    # and the width of the time buckets of churn_delivery.csv (None: 1/20 of the stream's
    # span, rounded up to a whole millisecond)
    churn_phases: tuple[str, ...] | None = None
    churn_bucket_us: int | None = None
    # reader(path) -> topology for RUN_DIR/topology/topo-<t>.npz; None = Topology.load.
    # Runs in Spark workers: must be a picklable module-level function.
    topology_reader: Callable | None = None
    # whether Spark executors can read the run directory (a filesystem every node mounts).
    # None: yes on a one-node Ray cluster, else the driver hands them the event logs (Arrow
    # in the tasks) and the topology files (Spark broadcast variables).
    shared_storage: bool | None = None
