"""Two or more runs side by side: the headline figures with their differences, and the
distributions the report plots, overlaid (compare.md / compare.html). Reads only the run
directories' summary.json and metrics/*.csv: no Spark."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import figures
from analysis.headline import headline_figures, value_at
from analysis.report import Section, render_html, render_md, write_atomic
from analysis.report import _fmt as fmt
from analysis.spread import spread_at

# (figure file, the metrics CSV it plots, the column naming the series, plotting function,
# its extra arguments, caption). Histograms are per topology, so that runs with different
# numbers of topologies compare; scribe_join is left out (equal to scribe by symmetry).
OVERLAYS = [
    ("delay_penalty_cdf.png", "delay_penalty_by_group.csv", "variant",
     figures.delay_penalty_cdf, {}, "Delay penalty (RAD, RMD) over groups"),
    ("rdp_rank1_cdf.png", "rdp_rank1.csv", "variant", figures.rdp_cdf, {},
     "RDP of the rank-1 group's members"),
    ("node_stress.png", "node_stress_histogram.csv", "variant",
     figures.node_stress_distribution, {"per_topology": True},
     "Node stress: children tables and entries per node, mean per topology"),
    ("link_stress.png", "link_stress_histogram.csv", "traffic",
     figures.link_stress_distribution, {"per_topology": True},
     "Link stress (Scribe, IP multicast, naive unicast), mean per topology"),
]
LEFT_OUT = {"traffic": {"scribe_join"}}


@dataclass
class Run:
    label: str
    path: Path
    summary: dict


def load_run(path: str | Path) -> dict:
    """A run directory's summary.json; ValueError naming what is missing or broken."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such run directory")
    if not path.is_dir():
        raise ValueError(f"{path}: not a directory (expected a run directory)")
    sj = path / "summary.json"
    if not sj.is_file():
        raise ValueError(f"{path}: no summary.json (an incomplete run? finish it with "
                         "`scenario --resume` or run `analyze` on it)")
    try:
        summary = json.loads(sj.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{sj}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(summary, dict) or not headline_figures(summary):
        raise ValueError(f"{sj}: no headline figures in it (an incomplete analysis? run "
                         "`analyze` on it)")
    return summary


def labels_for(paths: list[Path]) -> list[str]:
    """Short series labels: the directory names, or A, B, C... when two share a name."""
    names = [p.resolve().name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [chr(ord("A") + i) if i < 26 else f"run{i}" for i in range(len(paths))]


def comparison_rows(runs: list[Run]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: figure, each run's value (+- half its 95 % CI when it has one), and
    each later run's difference from the first (absolute and relative)."""
    seen: dict[tuple, str] = {}
    for r in runs:
        for label, path in headline_figures(r.summary):
            seen.setdefault(path, label)
    first = runs[0]
    header = ["figure", *(r.label for r in runs)]
    for r in runs[1:]:
        header += [f"{r.label} - {first.label}", "change"]
    rows = []
    for path, label in seen.items():
        vals = [value_at(r.summary, path) for r in runs]
        row = [label, *(_with_ci(v, spread_at(r.summary, path)) for v, r in zip(
            vals, runs, strict=True))]
        for v in vals[1:]:
            if v is None or vals[0] is None:
                row += ["", ""]
                continue
            d = float(v - vals[0])
            row += [("+" if d > 0 else "") + fmt(d), f"{d / vals[0]:+.1%}" if vals[0] else ""]
        rows.append(row)
    return header, rows


def _with_ci(v, s) -> str:
    if v is None:
        return "-"
    if s is None or s.get("ci95_high") is None:
        return fmt(v)
    half = float(s["ci95_high"] - v)
    return f"{fmt(v)} ± {half:,.0f}" if half >= 100 else f"{fmt(v)} ± {half:.2g}"


def _read_csv(path: Path) -> pd.DataFrame | None:
    try:
        return pd.read_csv(path) if path.is_file() else None
    except (pd.errors.EmptyDataError, pd.errors.ParserError):
        return None


def overlay_figures(runs: list[Run], out_dir: Path) -> list[tuple[Path, str]]:
    """Each distribution of every run in one plot (series named '<run>: <variant>');
    figures whose data no run has are left out."""
    written = []
    for name, csv, series, plot, kwargs, caption in OVERLAYS:
        parts = []
        for r in runs:
            df = _read_csv(r.path / "metrics" / csv)
            if df is not None and len(df):
                df = df[~df[series].astype(str).isin(LEFT_OUT.get(series, set()))].copy()
                df[series] = r.label + ": " + df[series].astype(str)
                parts.append(df)
        if parts:
            path = plot(pd.concat(parts, ignore_index=True), out_dir / "figures" / name,
                        **kwargs)
            styles = ", ".join(f"{r.label} {ls}" for r, ls in zip(
                runs, ("solid", "dashed", "dotted", "dash-dot") * 8, strict=False))
            written.append((path, f"{caption}; {styles}"))
    return written


def compare_runs(paths: list[str | Path], out_dir: str | Path) -> tuple[list[str],
                                                                        list[list[str]],
                                                                        Path, Path]:
    """Compare run directories: returns (header, rows, compare.md, compare.html) written
    under out_dir (figures in out_dir/figures). ValueError for a bad or incomplete run."""
    if len(paths) < 2:
        raise ValueError("compare needs at least two run directories")
    paths = [Path(p) for p in paths]
    summaries = [load_run(p) for p in paths]
    runs = [Run(lb, p, s) for lb, p, s in zip(labels_for(paths), paths, summaries,
                                               strict=True)]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    header, rows = comparison_rows(runs)
    runs_sec = Section("Runs", ["label", "run directory", "scenario", "nodes", "groups",
                                "topologies"],
                       [[r.label, str(r.path), str(r.summary.get("scenario")),
                         fmt(r.summary.get("nodes")), fmt(r.summary.get("groups")),
                         fmt(r.summary.get("topologies"))] for r in runs])
    figs_sec = Section("Headline figures", header, rows, [
        f"Differences are each run minus {runs[0].label}; ± is half the 95 % confidence "
        "interval across topologies (runs with one topology have none)."])
    figs = overlay_figures(runs, out_dir)
    title = "scribe-emu comparison: " + " vs ".join(r.label for r in runs)
    md = render_md(title, [runs_sec, figs_sec],
                   [(p.relative_to(out_dir).as_posix(), cap) for p, cap in figs])
    page = render_html(title, [runs_sec, figs_sec], figs)
    return (header, rows, write_atomic(out_dir / "compare.md", md),
            write_atomic(out_dir / "compare.html", page))
