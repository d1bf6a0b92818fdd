"""Scenario configuration: TOML files -> one validated, frozen `ScenarioConfig`.

Validation happens once, here, before any work: unknown sections and keys, wrong types,
out-of-range values, impossible sizes (a fixed group larger than the overlay, a Zipf rank
with no member), phase orders that cannot run, missing measured-topology files. Every
problem is a `ScenarioError` whose message is one line naming the key, the problem and
the valid choices. `to_toml()` writes the resolved configuration back (run dir config.toml,
the input of --resume).
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from actors.params import type_problem, with_presets
from actors.pastry.protocol import PARAMETERS as PASTRY_PARAMETERS
from actors.scribe.application import PARAMETERS as SCRIBE_PARAMETERS
from emulator.errors import first_line
from runtime.ray_spark import DRIVER_MEMORY, EXECUTOR_MEMORY

SCENARIO_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = SCENARIO_DIR.parent


class ScenarioError(ValueError):
    """Bad scenario input; the message is one line for the user."""


# ---- the schema ------------------------------------------------------------------------
# Each section: key -> (type, default, check, help). Types: int, float, bool, str, list.
# The [pastry] and [scribe] sections are the protocols' own parameter declarations
# (actors.params.Param, declared in actors/pastry/protocol.py and
# actors/scribe/application.py): one default, range and help text per parameter. The
# protocols take complete parameter dicts (ScenarioConfig.pastry_params / scribe_params,
# or protocol_params outside a scenario) and check them again when the stack is built.

def _pos(v):
    return v > 0


def _nonneg(v):
    return v >= 0


def _memory(v):
    return re.fullmatch(r"[1-9]\d*[kmgt]b?", v.strip().lower()) is not None


def _section(declared: dict) -> dict[str, tuple]:
    """A schema section made of a protocol's parameter declarations."""
    return {k: (p.type, p.default, p.in_range, p.describe()) for k, p in declared.items()}


# the sections made of a protocol's declarations (presets resolved before defaults fill)
PROTOCOL_SECTIONS = {"pastry": PASTRY_PARAMETERS, "scribe": SCRIBE_PARAMETERS}
PHASES = ("bootstrap", "create", "join", "multicast", "collapse", "multicast_collapsed",
          "multicast_bottleneck", "churn")
PARTITIONS = ("locality", "random")
GROUP_KINDS = ("zipf", "fixed")
PLACEMENTS = ("uniform", "lan_slots")        # topologies.hosts.PLACEMENTS
VOCABULARIES = ("groups", "pubsub")          # scenarios.vocabulary.TERMS
WARMUP_MODES = ("auto", "on", "off")
JIT_MODES = ("auto", "c1", "tiered")        # scenarios/analysis_spark.py jvm_conf
EVENT_LOG_LAYOUTS = ("auto", "object_store", "files")   # scenarios/event_logs.py

SCHEMA: dict[str, dict[str, tuple]] = {
    "run": {
        "nodes": (int, 2000, lambda v: v >= 2, "number of Pastry/Scribe nodes (>= 2)"),
        "groups": (int, 50, _pos, "number of groups (>= 1)"),
        "topologies": (int, 1, lambda v: 1 <= v <= 1000, "topology seeds to average (1..1000)"),
        "seed": (int, 1, _nonneg, "base seed (>= 0); topology t uses seed + t"),
        "shards": (int, 0, _nonneg,
                   "shard actors (0: one per CPU Ray sees, at most one per 10,000 nodes, "
                   "100,000 when the join builds the overlay)"),
        "retries": (int, 2, lambda v: 0 <= v <= 100, "times a phase is replayed from its "
                    "checkpoint after a shard process dies, and the analysis rerun after Spark "
                    "loses an executor (0..100; 0 = stop at once)"),
        "storage": (str, "", None, "where shards write Parquet event logs and checkpoints: "
                    "a local path, a mount every node shares, or a pyarrow filesystem URI "
                    "(s3://..., hdfs://...); empty: the run directory on one machine, the "
                    "object-store hand-off on a multi-node cluster"),
        "event_logs": (str, "auto", lambda v: v in EVENT_LOG_LAYOUTS,
                       "auto | object_store | files: how event logs reach Spark (auto: files "
                       "under run.storage or, on one machine, the run directory; the "
                       "object-store hand-off on a cluster without run.storage)"),
    },
    "topology": {
        "source": (str, "ts5050", None, "ts5050, ts600, rocketfuel:<path>[:<AS>], zoo:<path>, "
                   "planetlab:<path>, edges:<csv>, topohub:<name>"),
        "lan_us": (int, 1000, _pos, "LAN delay host<->router, us (> 0)"),
        "partition": (str, "locality", lambda v: v in PARTITIONS,
                      f"shard assignment: {' | '.join(PARTITIONS)}"),
        "placement": (str, "uniform", lambda v: v in PLACEMENTS,
                      f"host placement: {' | '.join(PLACEMENTS)} (uniform: each host on a "
                      "random router; lan_slots: a uniform sample of lan_hosts_per_router "
                      "LAN slots per router, docs/topologies.md)"),
        "lan_hosts_per_router": (int, 100, _pos, "LAN slots per router with placement = "
                                 "lan_slots (>= 1)"),
        "mean_core_delay_ms": (float, 0.0, _nonneg, "scale the core-link delays to this mean, "
                               "ms (0 = as generated or measured)"),
    },
    "groups": {
        "kind": (str, "zipf", lambda v: v in GROUP_KINDS, f"{' | '.join(GROUP_KINDS)}"),
        "exponent": (float, 1.25, _pos, "Zipf exponent e of gsize(r) = floor(N r^-e + 0.5)"),
        "size": (int, 11, _pos, "members per group when kind = fixed"),
    },
    "pastry": _section(PASTRY_PARAMETERS),
    "scribe": _section(SCRIBE_PARAMETERS),
    "phases": {
        "order": (list, ["bootstrap", "create", "join", "multicast"], None,
                  f"phase names from {', '.join(PHASES)}"),
        "gap_us": (int, 1_000_000, lambda v: v >= 250_000, "virtual time between the end "
                   "of a phase and the next phase's stimuli, us (>= 250000: longer than the "
                   "engine's 200 ms window cap)"),
        "join_spread_us": (int, 1_000_000, _nonneg, "member joins are spread uniformly over "
                           "this window, us"),
        "settle_us": (int, 5_000_000, _pos, "with periodic timers on (keep-alives, heartbeats) "
                      "a phase runs this long after its last stimulus, us"),
    },
    "churn": {
        "duration_us": (int, 20_000_000, _pos, "length of the churn phase, us"),
        "fail_rate_per_s": (float, 2.0, _nonneg, "node failures per second (Poisson)"),
        "downtime_us": (int, 5_000_000, _nonneg, "mean downtime before a failed node "
                        "recovers, us (0 = never)"),
        "multicast_interval_us": (int, 1_000_000, _pos, "each streaming group multicasts this "
                                  "often, us"),
        "stream_groups": (int, 0, _nonneg, "the top-ranked groups that stream (0 = all)"),
        "warmup_us": (int, 2_000_000, _nonneg, "failures start this long after the stream"),
        "rp_failures": (int, 0, _nonneg, "RPs of streaming groups that fail for good during "
                        "the stream, besides the random failures (distinct groups; each at a "
                        "uniform time between warmup and 2/3 of the stream)"),
    },
    "report": {
        "vocabulary": (str, "groups", lambda v: v in VOCABULARIES,
                       f"words of the console summary and report: {' | '.join(VOCABULARIES)} "
                       "(pubsub: topics, subscribers, events; same CSV columns)"),
    },
    "analysis": {
        "driver_memory": (str, DRIVER_MEMORY, _memory, "Spark driver memory, e.g. 3g (it "
                          "collects every metrics table)"),
        "executor_memory": (str, EXECUTOR_MEMORY, _memory,
                            "memory of each Spark executor, e.g. 3g"),
        "warmup": (str, "auto", lambda v: v in WARMUP_MODES, "start Spark while the "
                   "emulation runs and warm it up on a six-node run, so the analysis starts "
                   "warm (one machine only; results do not change): auto (on iff the "
                   "machine has more CPUs than the run has shards) | on | off"),
        "jit": (str, "auto", lambda v: v in JIT_MODES, "the Spark JVMs' compiler: c1 (the "
                "client compiler only: a fresh session's analysis of a small or mid-size run "
                "is 20-40 % faster) | tiered (Java's default: faster once warm, for large "
                "runs) | auto (c1 iff nodes x topologies <= 300,000; results do not change)"),
        "class_archive": (str, "on", lambda v: v in ("on", "off"), "on an embedded Ray, the "
                          "Spark JVMs map the classes an earlier session loaded (Java class "
                          "data sharing; the first session on a machine writes them when it "
                          "stops, ~250 MB under ~/.cache/scribe-emu/jvm): on | off"),
        "shared_storage": (bool, False, None, "the run directory is on a filesystem every Ray "
                           "node mounts (executors read it); false: they do on a one-node "
                           "cluster, elsewhere the driver hands them logs and topologies"),
    },
}
TOP_LEVEL = {"description": (str, "", None, "one line shown by `scenarios list`")}


def _check_type(where: str, t, v):
    """``v`` if it is of setting type ``t`` (a number as a float), else a ScenarioError."""
    why = type_problem(where, t, v)
    if why is not None:
        raise ScenarioError(why)
    return float(v) if t is float else v


# ---- the resolved configuration ----------------------------------------------------------

@dataclass(frozen=True)
class ScenarioConfig:
    """A validated scenario. Sections are plain dicts (read-only by convention)."""

    name: str
    description: str
    run: dict = field(default_factory=dict)
    topology: dict = field(default_factory=dict)
    groups_cfg: dict = field(default_factory=dict)
    pastry: dict = field(default_factory=dict)
    scribe: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)
    churn: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict)
    analysis: dict = field(default_factory=dict)

    # the names cli.py relies on
    @property
    def nodes(self) -> int:
        return self.run["nodes"]

    @property
    def groups(self) -> int:
        return self.run["groups"]

    @property
    def topologies(self) -> int:
        return self.run["topologies"]

    @property
    def seed(self) -> int:
        return self.run["seed"]

    @property
    def shards(self) -> int:
        return self.run["shards"]

    @property
    def phase_order(self) -> list[str]:
        return list(self.phases["order"])

    def section(self, name: str) -> dict:
        return getattr(self, "groups_cfg" if name == "groups" else name)

    def pastry_params(self, topo_seed: int) -> dict:
        """Parameters for `Pastry(app, params)`; its join schedule follows the topology seed."""
        p = dict(self.pastry)
        p["seed"] = int(topo_seed)
        return p

    def scribe_params(self) -> dict:
        """Parameters for `Scribe(params)`: the [scribe] settings as they are (Scribe maps
        those that stand for off or auto to its own values, Param.means)."""
        return dict(self.scribe)

    @property
    def periodic(self) -> bool:
        """True when timers never stop (keep-alives or heartbeats): phases need an end."""
        return bool(self.pastry["keepalive_us"] or self.scribe["heartbeat_us"])

    def to_dict(self) -> dict:
        d = {"name": self.name, "description": self.description}
        for s in SCHEMA:
            d[s] = dict(self.section(s))
        return d

    def to_toml(self) -> str:
        """The resolved configuration as TOML (loads back to an equal config)."""
        lines = [f"# resolved configuration of scenario {self.name!r}",
                 f"name = {_toml_value(self.name)}",
                 f"description = {_toml_value(self.description)}"]
        for s in SCHEMA:
            lines += ["", f"[{s}]"]
            for k, v in self.section(s).items():
                lines.append(f"{k} = {_toml_value(v)}")
        return "\n".join(lines) + "\n"


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else "nan"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


# ---- loading -----------------------------------------------------------------------------

def scenario_files() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SCENARIO_DIR.glob("*.toml"))}


def _resolve_file(name: str) -> tuple[str, Path]:
    files = scenario_files()
    if name in files:
        return name, files[name]
    p = Path(name).expanduser()
    if p.suffix == ".toml" or p.exists():
        if not p.is_file():
            raise ScenarioError(f"scenario file {p} does not exist")
        return p.stem, p
    raise ScenarioError(f"unknown scenario {name!r}; choose one of {', '.join(files)} "
                        "or give a path to a .toml file")


def read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{path}: not valid TOML ({e})") from None
    except OSError as e:
        raise ScenarioError(f"cannot read scenario file {path}: {e.strerror}") from None


def parse_set(item: str) -> tuple[str, str, object]:
    """'section.key=value' -> (section, key, value); the value is read as TOML, else as a
    bare string (so `topology.source=ts600` needs no quotes); a key that takes a string
    keeps the text as written (`pastry.join=2002`)."""
    if not isinstance(item, str) or "=" not in item:
        raise ScenarioError(f"--set {item!r}: expected section.key=value, e.g. pastry.l=32")
    path, _, raw = item.partition("=")
    path, raw = path.strip(), raw.strip()
    sec, dot, key = path.partition(".")
    if not dot or not key:
        raise ScenarioError(f"--set {item!r}: expected section.key=value with a section from "
                            f"{', '.join(SCHEMA)}")
    if sec not in SCHEMA:
        raise ScenarioError(f"--set {item!r}: unknown section {sec!r}; valid: {', '.join(SCHEMA)}")
    if key not in SCHEMA[sec]:
        raise ScenarioError(f"--set {item!r}: unknown key {sec}.{key}; valid: "
                            f"{', '.join(SCHEMA[sec])}")
    if raw == "":
        raise ScenarioError(f"--set {item!r}: missing value after '='")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    if SCHEMA[sec][key][0] is str and not isinstance(value, str):
        value = raw
    return sec, key, value


def analysis_settings(config_toml: Path | None, sets=()) -> dict:
    """The [analysis] settings for re-analysing a run: defaults, then the run's config.toml,
    then `sets` items ("analysis.key=value"; other sections are refused)."""
    given = {}
    if config_toml is not None and Path(config_toml).is_file():
        section = read_toml(Path(config_toml)).get("analysis", {})
        given.update(section if isinstance(section, dict) else {})
    for item in sets or ():
        sec, key, value = parse_set(item)
        if sec != "analysis":
            raise ScenarioError(f"--set {item!r}: analyze takes analysis.* settings only")
        given[key] = value
    return _merge({"analysis": given}, "analysis settings")["analysis"]


# Values that older versions wrote into a run's config.toml and that mean a current value
# (`analysis.warmup` was true/false before auto|on|off): a run made then can still be
# re-analysed or resumed.
LEGACY_VALUES = {("analysis", "warmup"): {True: "on", False: "off"}}


def _merge(raw: dict, where: str) -> dict:
    """Fill defaults, reject unknown sections/keys, check types (not cross-field rules)."""
    unknown = sorted(set(raw) - set(SCHEMA) - set(TOP_LEVEL) - {"name"})
    if unknown:
        raise ScenarioError(f"{where}: unknown section or key {unknown[0]!r}; valid sections: "
                            f"{', '.join(SCHEMA)}")
    out = {"description": _check_type(f"{where}: description", str, raw.get("description", ""))}
    for sec, keys in SCHEMA.items():
        given = raw.get(sec, {})
        if not isinstance(given, dict):
            raise ScenarioError(f"{where}: [{sec}] must be a table of keys")
        bad = sorted(set(given) - set(keys))
        if bad:
            raise ScenarioError(f"{where}: unknown key {sec}.{bad[0]}; valid: {', '.join(keys)}")
        if sec in PROTOCOL_SECTIONS:
            try:
                given = with_presets(PROTOCOL_SECTIONS[sec], given, f"{sec}.")
            except ValueError as e:
                raise ScenarioError(str(e)) from None
        vals = {}
        for k, (t, default, check, help_) in keys.items():
            v = given.get(k, default)
            v = LEGACY_VALUES.get((sec, k), {}).get(v, v) if isinstance(v, bool) else v
            v = _check_type(f"{sec}.{k}", t, v)
            if check is not None and not check(v):
                raise ScenarioError(f"{sec}.{k} = {v!r} is out of range: {help_}")
            vals[k] = list(v) if t is list else v
        out[sec] = vals
    return out


def _resolve_source(source: str) -> str:
    """Make file paths of measured sources absolute (relative to the project root when not
    found relative to the working directory) and check that the files exist."""
    kind, sep, rest = source.partition(":")
    if not sep or kind not in ("rocketfuel", "zoo", "planetlab", "edges"):
        if sep and kind != "topohub":
            raise ScenarioError(f"topology.source {source!r}: unknown kind {kind!r}; use ts5050, "
                                "ts600, rocketfuel:<path>[:<AS>], zoo:<path>, planetlab:<path>, "
                                "edges:<csv>, topohub:<name>")
        if not sep and source not in ("ts5050", "ts600"):
            raise ScenarioError(f"topology.source {source!r} is unknown; use ts5050, ts600, "
                                "rocketfuel:<path>[:<AS>], zoo:<path>, planetlab:<path>, "
                                "edges:<csv>, topohub:<name>")
        return source
    asn = ""
    if kind == "rocketfuel":
        head, colon, tail = rest.rpartition(":")
        if colon and tail.isdigit():
            rest, asn = head, ":" + tail
    p = Path(rest).expanduser()
    for cand in ([p] if p.is_absolute() else [Path.cwd() / p, PROJECT_ROOT / p]):
        if cand.exists():
            return f"{kind}:{cand.resolve()}{asn}"
    raise ScenarioError(f"topology.source: measured data file {rest} not found (looked in "
                        f"{Path.cwd()} and {PROJECT_ROOT}); give its path with "
                        f"--set topology.source={kind}:<path>")


def _validate_placement(cfg: ScenarioConfig) -> None:
    """lan_slots: the nodes must fit in the LAN slots (checked here for the generated
    presets, whose router count is fixed; measured maps are checked when loaded)."""
    from topologies import PRESETS
    t = cfg.topology
    if t["placement"] != "lan_slots" or t["source"] not in PRESETS:
        return
    slots = PRESETS[t["source"]].n_routers * t["lan_hosts_per_router"]
    if cfg.nodes > slots:
        raise ScenarioError(f"run.nodes = {cfg.nodes} exceeds the {slots} LAN slots of "
                            f"{t['source']} ({PRESETS[t['source']].n_routers} routers x "
                            f"topology.lan_hosts_per_router = {t['lan_hosts_per_router']})")


def _validate(cfg: ScenarioConfig) -> None:
    """Cross-field rules: sizes that cannot exist, phase orders that cannot run."""
    n, g = cfg.nodes, cfg.groups
    if cfg.shards > n:
        raise ScenarioError(f"run.shards = {cfg.shards} exceeds run.nodes = {n}: every shard "
                            "needs a node")
    gc = cfg.groups_cfg
    if gc["kind"] == "fixed" and gc["size"] > n:
        raise ScenarioError(f"groups.size = {gc['size']} exceeds run.nodes = {n}: a group "
                            "cannot have more members than there are nodes")
    if gc["kind"] == "zipf":
        smallest = math.floor(n * g ** -gc["exponent"] + 0.5)
        if smallest < 1:
            # largest r with N r^-e + 0.5 >= 1, i.e. r <= (2N)^(1/e); fix float rounding
            r = max(1, int((2 * n) ** (1 / gc["exponent"])))
            while r > 1 and math.floor(n * r ** -gc["exponent"] + 0.5) < 1:
                r -= 1
            while math.floor(n * (r + 1) ** -gc["exponent"] + 0.5) >= 1:
                r += 1
            raise ScenarioError(f"run.groups = {g} is impossible with {n} nodes: Zipf groups "
                                f"beyond rank {r} would have no member; use at most {r} groups")
    order = cfg.phase_order
    bad = [p for p in order if p not in PHASES]
    if bad:
        raise ScenarioError(f"phases.order: unknown phase {bad[0]!r}; valid: {', '.join(PHASES)}")
    if len(set(order)) != len(order):
        dup = next(p for p in order if order.count(p) > 1)
        raise ScenarioError(f"phases.order: phase {dup!r} appears twice")
    if not order or order[0] != "bootstrap":
        raise ScenarioError("phases.order must start with 'bootstrap' (it builds the overlay)")
    needs = {"join": ["create"], "multicast": ["join"], "collapse": ["join"],
             "multicast_collapsed": ["collapse"], "multicast_bottleneck": ["join"],
             "churn": ["join"], "create": []}
    for i, p in enumerate(order):
        for req in needs.get(p, []):
            if req not in order[:i]:
                raise ScenarioError(f"phases.order: {p!r} needs {req!r} before it")
    _validate_placement(cfg)
    s = cfg.scribe
    if s["bottleneck"] and "multicast" in order:
        raise ScenarioError("phases.order: with scribe.bottleneck = true the trees are the "
                            "remover's; use 'multicast_bottleneck' instead of 'multicast'")
    if "multicast_bottleneck" in order and not s["bottleneck"]:
        raise ScenarioError("phases.order: 'multicast_bottleneck' needs scribe.bottleneck = true")
    if "churn" in order:
        if not cfg.pastry["keepalive_us"] or not s["heartbeat_us"]:
            raise ScenarioError("phases.order: 'churn' needs pastry.keepalive_us > 0 and "
                                "scribe.heartbeat_us > 0 (failure detection and tree repair)")
        c = cfg.churn
        if c["warmup_us"] >= c["duration_us"]:
            raise ScenarioError(f"churn.warmup_us = {c['warmup_us']} must be shorter than "
                                f"churn.duration_us = {c['duration_us']}")
    # the protocols check the complete parameter dicts they are built with (the same
    # declarations as the schema's, so this only fails on what the schema cannot see)
    from actors.stack import make_stack
    try:
        make_stack(cfg.pastry_params(cfg.seed), cfg.scribe_params())
    except ValueError as e:
        raise ScenarioError(first_line(e)) from None


def build_config(name: str, raw: dict, where: str = "scenario") -> ScenarioConfig:
    merged = _merge(raw, where)
    merged["topology"]["source"] = _resolve_source(merged["topology"]["source"])
    cfg = ScenarioConfig(name=name, description=merged["description"], run=merged["run"],
                         topology=merged["topology"], groups_cfg=merged["groups"],
                         pastry=merged["pastry"], scribe=merged["scribe"],
                         phases=merged["phases"], churn=merged["churn"],
                         report=merged["report"], analysis=merged["analysis"])
    _validate(cfg)
    return cfg


def load_scenario(name: str, *, nodes=None, groups=None, topologies=None, seed=None,
                  shards=None, bootstrap=None, sets=()) -> ScenarioConfig:
    """A scenario by name (scenarios/<name>.toml) or path, with overrides applied.

    Order: the file, then each `sets` item ("section.key=value"), then the keyword
    overrides. Raises ScenarioError (one line) on any bad input.
    """
    if not isinstance(name, str) or not name:
        raise ScenarioError("scenario name must be a non-empty string")
    sname, path = _resolve_file(name)
    raw = read_toml(path)
    if isinstance(raw.get("name"), str) and raw["name"]:
        sname = raw["name"]      # a resolved config.toml keeps its scenario's name
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    if isinstance(sets, str):
        sets = [sets]
    for item in sets or ():
        sec, key, value = parse_set(item)
        raw.setdefault(sec, {})
        if not isinstance(raw[sec], dict):
            raise ScenarioError(f"{path}: [{sec}] must be a table of keys")
        raw[sec][key] = value
    for key, value in (("nodes", nodes), ("groups", groups), ("topologies", topologies),
                       ("seed", seed), ("shards", shards)):
        if value is not None:
            raw.setdefault("run", {})[key] = value
    if bootstrap is not None:
        raw.setdefault("pastry", {})["bootstrap"] = bootstrap
    return build_config(sname, raw, where=str(path.name))


def protocol_params(nodes: int = SCHEMA["run"]["nodes"][1], seed: int = 0, *,
                    pastry: dict | None = None, scribe: dict | None = None) -> tuple[dict, dict]:
    """The complete (pastry, scribe) parameter dicts the stack takes, outside a scenario
    (tests, benchmarks): the schema's defaults with the keys of ``pastry`` / ``scribe``
    replaced (checked as a scenario's are), for a run of ``nodes`` nodes whose join
    schedule follows ``seed``. Raises ScenarioError (one line) on a bad key or value."""
    merged = _merge({"run": {"nodes": nodes}, "pastry": dict(pastry or {}),
                     "scribe": dict(scribe or {})}, "protocol parameters")
    cfg = ScenarioConfig(name="protocol_params", description="", run=merged["run"],
                         pastry=merged["pastry"], scribe=merged["scribe"])
    return cfg.pastry_params(seed), cfg.scribe_params()


def with_overrides(cfg: ScenarioConfig, **sections) -> ScenarioConfig:
    """A copy with some section keys replaced, validated again (used by tests)."""
    raw = cfg.to_dict()
    for sec, vals in sections.items():
        raw[sec].update(vals)
    name = raw.pop("name")
    return build_config(name, raw)


__all__ = ["PHASES", "SCHEMA", "ScenarioConfig", "ScenarioError", "build_config",
           "load_scenario", "parse_set", "read_toml", "scenario_files", "with_overrides"]
