"""scribe-emu command line: run scenarios, build/inspect topologies, (re)analyze runs.

`python cli.py --help` from the checkout, or the installed console script `scribe-emu`.
Bad input is reported as one line `error: ...` on stderr with exit code 2; an unexpected
failure as one line with exit code 1 and the traceback saved to a file named in the line.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
import time
import traceback
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

try:   # typer >= 0.2x vendors click; older releases use the click package
    from typer._click import exceptions as _cx
except ImportError:  # pragma: no cover
    from click import exceptions as _cx

_EXITS = tuple({typer.Exit, getattr(_cx, "Exit", typer.Exit)})
_ABORTS = tuple({typer.Abort, getattr(_cx, "Abort", typer.Abort)})

ROOT = Path(__file__).resolve().parent
# Ray workers inherit this environment: they can import the project's packages even when
# it is run from a checkout that was not pip-installed.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                   if p and p != str(ROOT)])

app = typer.Typer(
    name="scribe-emu",
    help="Emulate Scribe multicast on Pastry at scale (Ray shards, virtual clock) and "
         "compute the published metrics with Spark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
topology_app = typer.Typer(help="Generate or inspect a network topology.", no_args_is_help=True)
app.add_typer(topology_app, name="topology")

out = Console()
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_BAD_INPUT = 2
EXIT_UNEXPECTED = 1


class BadInput(ValueError):
    """Raised by the CLI itself for input it refuses (bad path, missing run directory...)."""


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return " ".join(lines) if lines else ""


def _bad_input_types() -> tuple[type[BaseException], ...]:
    """The exception types that mean 'the user asked for something impossible'."""
    import tomllib
    types: list[type[BaseException]] = [BadInput, ValueError, FileNotFoundError,
                                         NotADirectoryError, IsADirectoryError,
                                         PermissionError, tomllib.TOMLDecodeError]
    try:
        from runtime.ray_spark import RuntimeSetupError
        types.append(RuntimeSetupError)
    except ImportError:
        pass
    # ScenarioError and TopologyError are ValueErrors by contract; listed for clarity.
    return tuple(types)


def _is_run_stopped(exc: BaseException) -> bool:
    try:
        from scenarios.run_dir import RunStopped
    except ImportError:
        return False
    return isinstance(exc, RunStopped)


def _save_traceback(exc: BaseException, run_dir: Path | None = None) -> Path:
    text = "".join(traceback.format_exception(exc))
    if run_dir is not None and run_dir.is_dir():
        path = run_dir / "run.log"
        with path.open("a") as f:
            f.write("\n[cli] unexpected error\n" + text)
        return path
    path = Path(tempfile.gettempdir()) / f"scribe-emu-error-{os.getuid()}.log"
    path.write_text(text)
    return path


def _fail(message: str, code: int) -> typer.Exit:
    err.print(f"error: {message}", markup=False)
    return typer.Exit(code)


def handled(*run_dir_args: str):
    """Turn exceptions of a command into one stderr line and an exit code (2 bad input,
    1 unexpected, 130 interrupted). Set SCRIBE_EMU_DEBUG=1 to get the traceback instead.

    run_dir_args: parameters naming a run directory; an unexpected error's traceback is
    appended to the first existing one's run.log (else saved in the temp directory)."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (*_EXITS, *_ABORTS, _cx.ClickException):
                raise
            except KeyboardInterrupt as exc:
                hint = getattr(exc, "resume_command", None)
                err.print("interrupted" + (f"; resume with: {hint}" if hint else ""),
                          markup=False)
                raise typer.Exit(130) from None
            except Exception as exc:
                if os.environ.get("SCRIBE_EMU_DEBUG"):
                    raise
                msg = _one_line(str(exc)) or type(exc).__name__
                run_dirs = [Path(kwargs[a]) for a in run_dir_args if kwargs.get(a)]
                run_dir = next((d for d in run_dirs if d.is_dir()), None)
                if _is_run_stopped(exc):
                    # an outside cause (lost shard, full disk): the line says how to go on;
                    # the traceback is in run.log already
                    raise _fail(msg, EXIT_UNEXPECTED) from None
                if isinstance(exc, _bad_input_types()):
                    if type(exc) is ValueError:
                        # A bare ValueError may also be a bug deep inside: keep its
                        # traceback without cluttering the one-line message.
                        _save_traceback(exc, None)
                    raise _fail(msg, EXIT_BAD_INPUT) from None
                where = _save_traceback(exc, run_dir)
                hint = ("see run.log in the run directory; " if run_dir is None else "") + \
                    f"traceback in {where}"
                raise _fail(f"unexpected {type(exc).__name__}: {msg} ({hint})",
                            EXIT_UNEXPECTED) from None
        return wrapper
    return deco


# ---------------------------------------------------------------------------- scenarios

def _get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:      # counts that went through pandas/JSON
            return f"{int(v):,}"
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"   # e.g. means over topologies
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def summary_rows(summary: dict, say=lambda label: label) -> list[tuple[str, str]]:
    """The key figures of a summary.json worth a glance in the terminal; `say` puts the
    labels into the run's vocabulary (analysis.vocabulary: groups or topics)."""
    rows = [("scenario", summary.get("scenario")), ("nodes", summary.get("nodes")),
            ("groups", summary.get("groups")), ("topologies", summary.get("topologies"))]
    dp = summary.get("delay_penalty_by_variant") or {}
    for variant, d in dp.items():
        rows.append((f"RAD median ({variant})", _get(d, "rad", "p50")))
        rows.append((f"RMD median ({variant})", _get(d, "rmd", "p50")))
    for variant, d in (summary.get("rdp_rank1_by_variant") or {}).items():
        rows.append((f"RDP median, rank-1 group's members ({variant})", _get(d, "median")))
    for variant, d in (summary.get("node_stress") or {}).items():
        rows.append((f"children entries per node, mean / max ({variant})",
                     f"{_fmt(_get(d, 'children_entries', 'mean'))} / "
                     f"{_fmt(_get(d, 'children_entries', 'max'))}"))
    for traffic, d in (summary.get("link_stress") or {}).items():
        if isinstance(d, dict) and d.get("total") is not None:
            rows.append((f"link stress total / max ({traffic})",
                         f"{_fmt(d.get('total'))} / {_fmt(d.get('max'))}"))
    ov = summary.get("overlay") or {}
    for k in ("mean_hops", "log16_nodes_ceil", "probes_per_join"):
        if k in ov:
            rows.append((k.replace("_", " "), ov[k]))
    timing = summary.get("timing") or {}
    for key, label in (("emulation_total", "emulation wall time (s)"),
                       ("analysis_total", "analysis wall time (s)")):
        if timing.get(key) is not None:
            rows.append((label, round(float(timing[key]), 1)))
    return [(say(k), v if isinstance(v, str) else _fmt(v)) for k, v in rows]


def print_summary(run_dir: Path) -> None:
    path = run_dir / "summary.json"
    table = Table(title=f"run {run_dir}", show_header=False, title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    if path.is_file():
        from analysis.vocabulary import translator
        summary = json.loads(path.read_text())
        for k, v in summary_rows(summary, translator(run_dir)):
            table.add_row(k, v)
        out.print(table)
        if not print_beside_paper(summary):     # its notes already give the sample count
            print_samples(summary)
    out.print(f"run directory: {run_dir}", markup=False, highlight=False)


def print_samples(summary: dict) -> None:
    """One line: how many samples the figures rest on, and where their spread is."""
    from analysis.spread import ONE_SAMPLE
    n = (summary.get("spread") or {}).get("samples")
    if n == 1:
        out.print(f"This run has {ONE_SAMPLE}.", markup=False, highlight=False)
    elif isinstance(n, int) and n > 1:
        out.print(f"{n} topologies: the figures are their means; report.md gives the std and "
                  "95 % confidence interval of each.", markup=False, highlight=False)


def print_beside_paper(summary: dict) -> bool:
    """The run's headline figures next to the published ones (paper scenarios only;
    returns whether it printed them)."""
    from analysis import published
    rows = published.beside_paper(summary)
    if not rows:
        return False
    table = Table(title=f"beside the paper ({published.source()['short']})",
                  title_justify="left")
    with_ci = any(r.ci95 for r in rows)       # one topology: no interval column at all
    for col in ("figure", "this run", *(["95 % CI"] * with_ci), "published", "ratio",
                *(["in CI"] * with_ci)):
        table.add_column(col, justify="left" if col == "figure" else "right")
    for r in rows:
        ci = [f"{_fmt(r.ci95[0])} .. {_fmt(r.ci95[1])}" if r.ci95 else ""] * with_ci
        inside = [("yes" if r.ci95[0] <= r.published <= r.ci95[1] else "no")
                  if r.ci95 else ""] * with_ci
        table.add_row(r.label, _fmt(r.ours), *ci, ("~" if r.approx else "") + _fmt(r.published),
                      "-" if r.ratio is None else f"{r.ratio:.2f}", *inside)
    out.print(table)
    for note in published.setup_notes(summary, short=True):
        out.print(note, markup=False, highlight=False)
    return True


def seed_range(text: str, seed: int | None, topologies: int | None) -> tuple[int, int]:
    """`--seeds A..B` as (seed A, B - A + 1 topologies); refuses it with --seed/--topologies."""
    import re
    m = re.fullmatch(r"\s*(\d+)\s*\.\.\s*(\d+)\s*", text)
    if not m:
        raise BadInput(f"--seeds {text!r}: expected A..B with whole numbers A <= B, e.g. 1..10")
    lo, hi = int(m.group(1)), int(m.group(2))
    if lo > hi:
        raise BadInput(f"--seeds {text!r}: the first seed must not exceed the last")
    if seed is not None or topologies is not None:
        raise BadInput("--seeds sets both the seed and the number of topologies: "
                       "give it without --seed and --topologies")
    return lo, hi - lo + 1


class Bootstrap(StrEnum):
    oracle = "oracle"
    protocol = "protocol"


def _scenario_sets(sets: list[str] | None, name: str | None, resume: Path | None) -> list[str]:
    """The --set items, once the arguments of `scenario` are known to make sense."""
    sets = list(sets or [])
    for s in sets:
        if "=" not in s or not s.split("=", 1)[0].strip():
            raise BadInput(f"--set {s!r}: expected KEY=VALUE, e.g. --set pastry.l=32")
    if resume is not None and not resume.is_dir():
        raise BadInput(f"--resume {resume}: no such run directory")
    if name is None and resume is None:
        raise BadInput("missing scenario NAME (see `scenarios`), or --resume RUN_DIR")
    return sets


@app.command()
@handled("out_dir", "resume")
def scenario(
    name: Annotated[str | None, typer.Argument(
        metavar="[NAME]", help="Scenario name (see `scenarios`) or a .toml file (not needed "
        "with --resume).")] = None,
    nodes: Annotated[int | None, typer.Option(
        "--nodes", min=2, help="Number of Pastry nodes.")] = None,
    groups: Annotated[int | None, typer.Option(
        "--groups", min=1, help="Number of groups.")] = None,
    topologies: Annotated[int | None, typer.Option(
        "--topologies", min=1, help="Number of topology seeds to average over.")] = None,
    seed: Annotated[int | None, typer.Option(
        "--seed", min=0, help="Base random seed.")] = None,
    seeds: Annotated[str | None, typer.Option(
        "--seeds", metavar="A..B",
        help="Repeat the scenario over seeds A..B in one run: --seed A --topologies B-A+1 "
             "(topology t uses seed A+t); the report gives mean, std and 95 % CI.")] = None,
    shards: Annotated[int | None, typer.Option(
        "--shards", min=0,
        help="Shard actors per topology (0: one per CPU Ray sees, at most one per 10,000 "
             "nodes, 100,000 when the join builds the overlay).")] = None,
    bootstrap: Annotated[Bootstrap | None, typer.Option(
        "--bootstrap", case_sensitive=False,
        help="Pastry bootstrap: join protocol on the virtual clock, or computed state.")] = None,
    address: Annotated[str | None, typer.Option(
        "--address", help="Ray cluster address (default $RAY_ADDRESS, else a local Ray).")] = None,
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="Run directory to create.")] = None,
    sets: Annotated[list[str] | None, typer.Option(
        "--set", metavar="KEY=VALUE",
        help="Override a config key, e.g. --set pastry.l=32 (repeatable).")] = None,
    resume: Annotated[Path | None, typer.Option(
        "--resume", metavar="RUN_DIR",
        help="Resume a stopped run from its last completed phase.")] = None,
    no_progress: Annotated[bool, typer.Option(
        "--no-progress", help="No progress display.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Run even when the memory estimate exceeds the machine's memory.")
    ] = False,
):
    """Run a scenario end to end: topology, emulation, Spark analysis, report."""
    sets = _scenario_sets(sets, name, resume)
    if seeds is not None:
        seed, topologies = seed_range(seeds, seed, topologies)
    import scenarios
    cfg = None
    if name is not None:
        cfg = scenarios.load_scenario(name, nodes=nodes, groups=groups, topologies=topologies,
                                      seed=seed, shards=shards,
                                      bootstrap=bootstrap.value if bootstrap else None,
                                      sets=list(sets))
    from runtime import ray_spark
    try:
        run_dir = scenarios.run_scenario(cfg, out=out_dir, address=address, resume=resume,
                                         progress=not no_progress, force=force)
    finally:
        _note_class_archives()
        ray_spark.stop_ray()    # Spark's JVMs and an embedded Ray go with this process
    print_summary(Path(run_dir))


def _note_class_archives() -> None:
    """Announce the one-off wait when stopping Spark writes its JVMs' class archives."""
    from runtime.ray_spark import class_archives_pending
    if class_archives_pending():
        out.print("Saving the Spark JVMs' loaded classes, once per machine, so that later "
                  "analyses start faster (~10 s)...", style="dim", markup=False,
                  highlight=False)


@app.command("scenarios")
@handled()
def list_scenarios_cmd():
    """List the scenarios with their default sizes."""
    import scenarios
    table = Table(title="scenarios")
    for col, just in (("name", "left"), ("nodes", "right"), ("groups", "right"),
                      ("topologies", "right"), ("description", "left")):
        table.add_column(col, justify=just, overflow="fold", no_wrap=col != "description")
    for info in scenarios.list_scenarios():
        table.add_row(info.name, f"{info.nodes:,}", f"{info.groups:,}", str(info.topologies),
                      info.description)
    out.print(table)


@app.command("warm")
@handled()
def warm_cmd(
    names: Annotated[list[str] | None, typer.Argument(
        metavar="[NAME]...", help="Scenarios whose kernels to compile (default: "
        "small_groups_30k, the scenario of `make run`).")] = None,
    no_progress: Annotated[bool, typer.Option(
        "--no-progress", help="No status line.")] = False,
):
    """Compile scenarios' numba kernels into the cache, once per machine (`make run` does
    it for the default scenario): a scaled-down emulation on a local Ray, no analysis."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from runtime import ray_spark
    from scenarios.warm import warm

    # the step under way and its time, on a terminal (a finished step prints its line)
    status = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=out, transient=True, disable=no_progress or not out.is_terminal)
    task = status.add_task("reading the scenarios", total=None)
    saved = os.environ.pop("RAY_ADDRESS", None)    # the cache is this machine's: local Ray
    try:
        with status:
            seconds = warm(names or ["small_groups_30k"],
                           say=lambda s: out.print(s, markup=False, highlight=False),
                           doing=lambda s: status.reset(task, description=s))
    finally:
        ray_spark.stop_ray()
        if saved is not None:
            os.environ["RAY_ADDRESS"] = saved
    out.print(f"warm: done in {seconds:.1f} s", markup=False, highlight=False)


# ---------------------------------------------------------------------------- topology

def _describe_table(title: str, desc: dict) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("key")
    table.add_column("value", overflow="fold")
    for k, v in desc.items():
        if isinstance(v, dict):
            v = ", ".join(f"{kk}: {_fmt(vv)}" for kk, vv in v.items())
        table.add_row(k, _fmt(v))
    return table


def _check_hosts(hosts: int) -> None:
    if hosts < 0:
        raise BadInput(f"--hosts must be >= 0, got {hosts}")


@topology_app.command("generate")
@handled()
def topology_generate(
    source: Annotated[str, typer.Argument(
        help="ts5050 | ts600 | rocketfuel:<path>[:<AS>] | zoo:<graphml> | "
             "planetlab:<matrix> | edges:<csv> | topohub:<name>")],
    seed: Annotated[int, typer.Option(
        "--seed", min=0, help="Generator / host placement seed.")] = 0,
    hosts: Annotated[int, typer.Option("--hosts", help="End hosts to attach.")] = 1000,
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="Output .npz (default: <source>-s<seed>-h<hosts>.npz here).")] = None,
):
    """Build a topology, save it as .npz and print its summary."""
    _check_hosts(hosts)
    from topologies import make_topology
    if out_file is None:
        slug = "".join(c if c.isalnum() else "_" for c in Path(source.split(":")[-1]).name)
        out_file = Path(f"{slug or 'topology'}-s{seed}-h{hosts}.npz")
    if out_file.suffix != ".npz":
        raise BadInput(f"--out {out_file}: the file name must end in .npz")
    if out_file.parent.exists() and not out_file.parent.is_dir():
        raise BadInput(f"--out {out_file}: {out_file.parent} is not a directory")
    topo = make_topology(source, seed, hosts)
    topo.save(out_file)
    out.print(_describe_table(f"{source} (seed {seed})", topo.describe()))
    out.print(f"saved {out_file}", markup=False, highlight=False)


@topology_app.command("inspect")
@handled()
def topology_inspect(
    what: Annotated[str, typer.Argument(
        metavar="FILE_OR_SOURCE",
        help="A .npz written by `topology generate`, or a source string.")],
    seed: Annotated[int, typer.Option(
        "--seed", min=0, help="Seed (for a source string).")] = 0,
    hosts: Annotated[int, typer.Option(
        "--hosts", help="Hosts to attach (for a source string).")] = 1000,
    figure: Annotated[Path | None, typer.Option(
        "--figure", help="Write the router layout (or, without positions, the delay "
        "histograms) to this PNG; the delay histograms also go to <name>-delays.png.")] = None,
):
    """Print a topology's summary (routers, links, delays, diameters, policy stretch)."""
    _check_hosts(hosts)
    from topologies import Topology, TopologyError, make_topology
    from topologies.figures import plot_delay_distribution, plot_layout
    path = Path(what)
    if what.endswith(".npz") or (path.exists() and ":" not in what):
        if not path.is_file():
            raise BadInput(f"{what}: no such topology file")
        if not os.access(path, os.R_OK):
            raise BadInput(f"{what}: file is not readable")
        topo = Topology.load(path)
        title = str(path)
    else:
        topo = make_topology(what, seed, hosts)
        title = f"{what} (seed {seed})"
    if figure is not None and figure.suffix.lower() != ".png":
        raise BadInput(f"--figure {figure}: the file name must end in .png")
    out.print(_describe_table(title, topo.describe()))
    if figure is not None:
        figure.parent.mkdir(parents=True, exist_ok=True)
        delays = figure.with_name(f"{figure.stem}-delays.png")
        try:
            plot_layout(topo, figure)
            plot_delay_distribution(topo, delays)
            written = [figure, delays]
        except TopologyError:          # no router positions (latency matrix, some maps)
            plot_delay_distribution(topo, figure)
            written = [figure]
        out.print("wrote " + ", ".join(map(str, written)), markup=False, highlight=False)


# ---------------------------------------------------------------------------- analysis

def _run_dir(path: Path) -> Path:
    if not path.exists():
        raise BadInput(f"{path}: no such run directory")
    if not path.is_dir():
        raise BadInput(f"{path}: not a directory (expected a run directory)")
    return path


def scenario_meta(run_dir: Path) -> dict:
    """{"scenario", "nodes", "groups", "topologies"} from the run's config.toml (the keys
    that are present: under [run] or [scenario], else at the top level)."""
    import tomllib
    path = run_dir / "config.toml"
    if not path.is_file():
        return {}
    try:
        cfg = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{path}: not valid TOML ({_one_line(str(exc))})") from None
    meta = {}
    sections = [cfg.get(k) for k in ("run", "scenario") if isinstance(cfg.get(k), dict)]
    for src in (*sections, cfg):
        for key, names in (("scenario", ("name", "scenario")), ("nodes", ("nodes",)),
                           ("groups", ("groups",)), ("topologies", ("topologies",))):
            for n in names:
                v = src.get(n)
                if key not in meta and isinstance(v, (str, int)) and not isinstance(v, bool):
                    meta[key] = v
    return meta


def _events_root(run_dir: Path) -> str | None:
    """Where a run's Parquet event logs are: the run.storage its STORAGE file names, else
    the run directory (None). A run that handed its logs to Spark through the object store
    kept none, which is bad input here."""
    import json

    from emulator.storage import Storage
    from scenarios.event_logs import STORAGE_POINTER
    pointer = run_dir / STORAGE_POINTER
    if pointer.is_file():
        root = pointer.read_text().strip()
        if not Storage(root).exists("events"):
            raise BadInput(f"{run_dir}: its event logs were written to {root} (run.storage), "
                           "which has no events/ now")
        return root
    if (run_dir / "events").is_dir():
        return None
    state = run_dir / "state.json"
    if state.is_file() and json.loads(state.read_text()).get("event_logs", {}).get("handoff"):
        raise BadInput(f"{run_dir}: its event logs went to Spark through the object store "
                       "and were not kept; run it again with --set run.storage=<path or URI> "
                       "to analyze it later")
    raise BadInput(f"{run_dir}: no events/ directory (not a run directory?)")


@app.command()
@handled("run_dir")
def analyze(
    run_dir: Annotated[Path, typer.Argument(
        help="A run directory (with events/ and topology/).")],
    address: Annotated[str | None, typer.Option(
        "--address", help="Ray cluster address (default $RAY_ADDRESS, else a local Ray).")
    ] = None,
    sets: Annotated[list[str] | None, typer.Option(
        "--set", metavar="KEY=VALUE",
        help="Analysis setting, e.g. --set analysis.driver_memory=6g (repeatable; default: "
             "the run's config.toml).")] = None,
):
    """Recompute every metric of a run from its Parquet event logs, then its report."""
    run_dir = _run_dir(run_dir)
    events = _events_root(run_dir)
    meta = scenario_meta(run_dir)
    from analysis import AnalysisOptions, run_analysis
    from analysis.report import write_report
    from runtime import ray_spark
    from scenarios.config import analysis_settings
    settings = analysis_settings(run_dir / "config.toml", sets)
    options = AnalysisOptions(shared_storage=True if settings["shared_storage"] else None)
    started = time.perf_counter()
    from analysis.spark_daemon import worker_conf
    embedded = not (address or os.environ.get("RAY_ADDRESS"))
    from scenarios.analysis_spark import jvm_conf
    jit = jvm_conf(settings["jit"], meta.get("nodes"), meta.get("topologies"))
    with ray_spark.session(address=address, memory=settings["executor_memory"],
                           driver_memory=settings["driver_memory"],
                           configs={**worker_conf(local=embedded), **jit},
                           class_archive=settings["class_archive"] == "on") as spark:
        # this analysis' Spark start replaces the run's in summary.json, like its sections
        spark_start = {"spark_start": round(time.perf_counter() - started, 3)}
        run_analysis(run_dir, spark, scenario_meta=meta, options=options,
                     extra={"timing": spark_start}, events=events)
        _note_class_archives()
    md, html = write_report(run_dir)
    print_summary(run_dir)
    out.print(f"report: {md}, {html}", markup=False, highlight=False)


@app.command()
@handled("run_dir")
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory with summary.json.")],
):
    """Write report.md and report.html of a run (no Spark needed)."""
    run_dir = _run_dir(run_dir)
    from analysis.report import write_report
    md, html = write_report(run_dir)
    out.print(f"report: {md}, {html}", markup=False, highlight=False)


@app.command()
@handled()
def compare(
    run_dirs: Annotated[list[Path], typer.Argument(
        metavar="RUN_A RUN_B [RUN...]", help="Two or more run directories (with summary.json).")],
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="Directory for compare.md/.html and the overlaid figures "
                      "(default: compare-<A>-vs-<B> next to RUN_A).")] = None,
):
    """Headline figures of runs side by side with differences; compare.md/.html with the
    distributions overlaid (no Spark needed)."""
    from analysis.compare import compare_runs, load_run
    if len(run_dirs) < 2:
        raise BadInput("compare needs at least two run directories")
    for d in run_dirs:
        load_run(d)               # a bad or incomplete run: one error line before any output
    if out_dir is None:
        a = run_dirs[0].resolve()
        out_dir = a.parent / ("compare-" + "-vs-".join(p.resolve().name for p in run_dirs[:3]))
    header, rows, md, html = compare_runs(run_dirs, out_dir)
    table = Table(title="comparison", title_justify="left")
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i == 0 else "right", overflow="fold")
    for r in rows:
        table.add_row(*r)
    out.print(table)
    out.print(f"compare: {md}, {html}", markup=False, highlight=False)


# ---------------------------------------------------------------------------- entry point

def main(argv: list[str] | None = None) -> None:
    """Console-script entry: click's usage errors become one `error:` line (exit 2)."""
    try:
        rv = app(args=argv, prog_name="scribe-emu", standalone_mode=False)
    except _cx.NoArgsIsHelpError as exc:
        print(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(0)
    except _cx.UsageError as exc:
        cmd = exc.ctx.command_path if exc.ctx else "scribe-emu"
        err.print(f"error: {_one_line(exc.format_message())} (see `{cmd} --help`)",
                  markup=False)
        sys.exit(EXIT_BAD_INPUT)
    except _cx.ClickException as exc:
        err.print(f"error: {_one_line(exc.format_message())}", markup=False)
        sys.exit(exc.exit_code)
    except (*_ABORTS, KeyboardInterrupt):
        err.print("interrupted", markup=False)
        sys.exit(130)
    except _EXITS as exc:
        sys.exit(exc.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
