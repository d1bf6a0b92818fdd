"""How much memory a run needs, estimated from its configuration before anything starts,
and the check that refuses a run that would not fit (`check_memory`).

The figures are upper-end rates measured on the development machine (BENCHMARKS.md): the
1,000,000-node `paper_zipf_1500` run (oracle, 2 shards) peaked at 7.1-7.4 GB of the machine
in the Spark analysis and 6.7 GB while emulating; the 100,000-node protocol run
(`paper_zipf_1500_protocol`, one shard) at 5.3 GB, its shard at 1.94 GB while writing its
27.9 M-row bootstrap log; `small_groups_30k` at 4.9 GB, in the analysis (0.7-0.8 GB of
the machine in use before each run). A run
refused here would really not have fitted; a run admitted may still need swap-free
headroom for the rest of the machine. Topologies run one after the other and the Spark
analysis spills to disk, so neither multiplies the estimate.
"""

from __future__ import annotations

import math

from .config import ScenarioConfig, ScenarioError
from .progress import log, warn

# the fixed part: Ray's head processes and object store floor, the Spark driver and
# executor JVMs (their heap caps: runtime.ray_spark.DRIVER_MEMORY, EXECUTOR_MEMORY), this
# driver process
BASE_BYTES = 3 * 1024**3
NODE_BYTES = 6 * 1024             # Pastry tables + Scribe state + engine queues, per node
MEMBER_BYTES = 400                # per (group, member): tree entries, membership rows
MESSAGE_ROW_BYTES = 80            # per message logged in the largest phase, at flush (the
                                  # 100,000-node protocol run's 27.9 M-row bootstrap log: its
                                  # shard 0.63 GB before, 1.94 GB writing it, 47 B a row)
# routers of the built-in sources (the dense delay table is routers^2 int32, twice: driver
# and object store); measured maps are sized by their files, unknown here: assume ts5050's
ROUTERS = {"ts600": 600, "ts5050": 5050}
DEFAULT_ROUTERS = 5050


def _members(cfg: ScenarioConfig) -> int:
    g = cfg.groups_cfg
    if g["kind"] == "fixed":
        return cfg.groups * min(g["size"], cfg.nodes)
    # sum of floor(N r^-e + 0.5) over r = 1..G, bounded by an integral (O(1) at any size)
    n, e, groups = cfg.nodes, g["exponent"], cfg.groups
    head = min(groups, 1000)
    total = sum(min(n, math.floor(n * r ** -e + 0.5)) for r in range(1, head + 1))
    if groups > head:
        # integral of N r^-e from head to groups (+ 0.5 per group for the rounding)
        tail = (n * (head ** (1 - e) - groups ** (1 - e)) / (e - 1) if e != 1
                else n * math.log(groups / head))
        total += int(tail + 0.5 * (groups - head))
    return int(total)


def _phase_messages(cfg: ScenarioConfig, members: int) -> dict[str, int]:
    """Messages each phase emulates (and logs), from the rates of the committed runs."""
    n = cfg.nodes
    hops = max(1, math.ceil(math.log(max(n, 2), 2 ** cfg.pastry["b"])))
    per = {
        "bootstrap": 250 * n if cfg.pastry["bootstrap"] == "protocol" else 0,
        "create": 10 * cfg.groups,
        "join": members * (hops + 4),
        "multicast": 2 * members,
        "collapse": 2 * members + n,
        "multicast_collapsed": 2 * members,
        "multicast_bottleneck": 2 * members,
        "churn": int(60 * n * cfg.churn["duration_us"] / 1e6),
    }
    return {p: per[p] for p in cfg.phase_order}


def estimate_memory(cfg: ScenarioConfig) -> dict[str, int]:
    """Bytes a run of `cfg` needs at its peak, by part, and their ``total``."""
    members = _members(cfg)
    routers = ROUTERS.get(cfg.topology["source"], DEFAULT_ROUTERS)
    largest_phase = max(_phase_messages(cfg, members).values(), default=0)
    parts = {
        "Ray and Spark": BASE_BYTES,
        "node state": cfg.nodes * NODE_BYTES,
        "topology tables": 2 * 4 * routers * routers,
        "groups": members * MEMBER_BYTES,
        "largest phase log": largest_phase * MESSAGE_ROW_BYTES,
    }
    parts["total"] = sum(parts.values())
    return parts


def machine_memory(cluster: bool = False) -> int:
    """Physical memory of this machine, or with ``cluster`` the memory Ray reports for the
    connected cluster (its nodes' memory plus object stores)."""
    if cluster:
        import ray
        res = ray.cluster_resources()
        return int(res.get("memory", 0) + res.get("object_store_memory", 0))
    import psutil
    return int(psutil.virtual_memory().total)


def format_bytes(n: int | float) -> str:
    for unit, size in (("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n / 1024:,.0f} KB"


def check_memory(cfg: ScenarioConfig, *, force: bool = False, cluster: bool = False,
                 total: int | None = None) -> None:
    """Refuse (ScenarioError) a run whose memory estimate exceeds this machine's memory (or
    the connected Ray cluster's), before it starts, rather than be killed by the OOM
    killer hours in. `force` logs the estimate and goes on."""
    need = estimate_memory(cfg)
    have = machine_memory(cluster=cluster) if total is None else int(total)
    where = "the Ray cluster's" if cluster else "this machine's"
    if need["total"] <= have:
        log.info("memory estimate %s of %s %s", format_bytes(need["total"]), where,
                 format_bytes(have))
        return
    parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in need.items() if k != "total" and v)
    msg = (f"run needs about {format_bytes(need['total'])} of memory ({parts}), more than "
           f"{where} {format_bytes(have)}")
    if force:
        warn(f"{msg}; going on (--force)")
        return
    raise ScenarioError(f"{msg}; use fewer nodes/groups, a cluster (--address), or --force "
                        "to try anyway")

