"""Event-log schema and analysis defaults, mirroring docs/ARCHITECTURE.md ("Event logs").

`analysis/` never imports `actors/` and copies none of its constants: traffic is selected by
type *name*, resolved to codes through the run's own type table (`analysis.protocol`);
scenarios may pass their own selections to `run_analysis`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from analysis.protocol import SCRIBE_DATA, SCRIBE_JOIN, SCRIBE_MCAST, RunProtocol

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
    # reliable layer: every copy the tree brings a member, before hold-back and
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

# code ranges of docs/ARCHITECTURE.md, for codes no table names: (low, high, prefix)
TYPE_RANGES: tuple[tuple[int, int, str], ...] = (
    (0, 9, "engine"), (10, 49, "pastry"), (50, 89, "scribe"), (90, 109, "reliable"))


def type_name(code: int, names: dict[int, str] | None = None) -> str:
    """Readable name of a message type code: `names` (the run's type table, then the
    caller's), else a name from the code's range in docs/ARCHITECTURE.md."""
    if names and code in names:
        return names[code]
    for low, high, prefix in TYPE_RANGES:
        if low <= code <= high:
            return f"{prefix}_{code}"
    return f"type_{code}"


@dataclass(frozen=True)
class Traffic:
    """A selection of `message` rows whose hops are one traffic pattern for link stress.

    label: name in the CSVs / summary (a Scribe variant such as "scribe", or "scribe_join");
    phases: phase names the rows must have; types: message type names (resolved to this
    run's codes through its `message_type` table; a name the run lacks selects nothing) or
    codes.
    """

    label: str
    phases: tuple[str, ...]
    types: tuple[int | str, ...]


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
    # names of type codes the run's message_type table lacks (the table wins)
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


def resolve_traffic(options: AnalysisOptions, protocol: RunProtocol) -> AnalysisOptions:
    """`options` with every traffic selection's type names replaced by this run's codes."""
    return replace(options, traffic=tuple(replace(t, types=protocol.codes(t.types))
                                          for t in options.traffic))
