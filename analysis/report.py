"""report.md and report.html of a run: the run beside the paper, the spread across
topologies, key figures, plots and the resolved configuration.

Reads only files of the run directory (summary.json, figures/, config.toml), so it runs
without Spark once `run_analysis` has written them. `render_md` / `render_html` are shared
with `analysis.compare`.
"""

from __future__ import annotations

import base64
import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from analysis import published
from analysis.headline import headline_figures, value_at
from analysis.spread import ONE_SAMPLE, spread_at
from analysis.vocabulary import translator

FIGURES = [("delay_penalty_cdf.png", "Delay penalty (RAD, RMD) over groups"),
           ("rdp_rank1_cdf.png", "RDP of the rank-1 group's members"),
           ("node_stress.png", "Node stress: children tables and entries per node"),
           ("link_stress.png", "Link stress: Scribe vs IP multicast vs naive unicast"),
           ("group_size_by_rank.png", "Group size vs rank"),
           ("churn_delivery.png", "Delivery ratio over time under churn"),
           ("churn_failover.png", "RP fail-over time per failed RP")]


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"             # counts that went through pandas/JSON
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _ci(lo, hi) -> str:
    return "" if lo is None or hi is None else f"[{_fmt(lo)}, {_fmt(hi)}]"


@dataclass
class Section:
    """A titled table of the report, with sentences before it."""
    title: str
    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


def beside_paper_section(summary: dict) -> Section | None:
    """This run's figures next to the published ones (None: the paper has none for the
    scenario)."""
    rows = published.beside_paper(summary)
    if not rows:
        return None
    src = published.source()
    with_ci = any(r.ci95 for r in rows)       # one topology: no interval column at all
    table = [[r.label, _fmt(r.ours), *[_ci(*(r.ci95 or (None, None)))] * with_ci,
              ("~" if r.approx else "") + _fmt(r.published),
              "" if r.ratio is None else f"{r.ratio:.2f}",
              *[_inside(r.published, r.ci95)] * with_ci] for r in rows]
    notes = published.setup_notes(summary) + [
        "Ratio = this run / published; ~ marks values read off the paper's plots. The "
        "figures the paper also drew carry the published values as black marks."]
    return Section(f"This run beside the paper ({src['short']})",
                   ["figure", "this run", *["95 % CI"] * with_ci, "published", "ratio",
                    *["published in CI"] * with_ci], table, notes)


def _inside(value: float, ci: tuple[float, float] | None) -> str:
    return "" if ci is None else ("yes" if ci[0] <= value <= ci[1] else "no")


def spread_section(summary: dict) -> Section:
    """Mean, std and 95 % CI across topologies of every headline figure (or the plain
    statement that the run is one sample)."""
    sp = summary.get("spread") or {}
    samples = sp.get("samples", summary.get("topologies"))
    title = "Spread across topologies"
    if not isinstance(samples, int) or samples < 2:
        return Section(title, [], [], [f"This run has {ONE_SAMPLE}."])
    rows = []
    for label, path in headline_figures(summary):
        s = spread_at(summary, path)
        if s is not None:
            rows.append([label, _fmt(value_at(summary, path)), _fmt(s["std"]),
                         _ci(s["ci95_low"], s["ci95_high"]), str(s.get("n", samples))])
    if not rows:
        return Section(title, [], [], [f"{samples} topologies, but summary.json has no "
                                       "spread (analysed by an older version): run "
                                       "`cli.py analyze` on this run to get it."])
    return Section(title, ["figure", "mean", "std", "95 % CI of the mean", "n"], rows,
                   [f"{samples} topologies; {sp.get('method', '')}. Per-topology values: "
                    "metrics/*_summary.csv (columns <figure>_std, _ci95_low, _ci95_high on "
                    "the mean rows)."])


def _tables(summary: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the key figures."""
    out = []
    dp = summary.get("delay_penalty_by_variant") or {}
    out.append(("Delay penalty (over groups)", ["variant", "RAD p50", "RAD p90", "RAD max",
                                                 "RMD p50", "RMD p90", "RMD max"],
                [[v, *(_fmt(d[m][k]) for m in ("rad", "rmd") for k in ("p50", "p90", "max"))]
                 for v, d in dp.items()]))
    rdp = summary.get("rdp_rank1_by_variant") or {}
    out.append(("RDP, rank-1 group", ["variant", "mean", "median", "p80", "p98", "frac < 1"],
                [[v, *(_fmt(d[k]) for k in ("mean", "median", "p80", "p98", "frac_below_1"))]
                 for v, d in rdp.items()]))
    ns = summary.get("node_stress") or {}
    out.append(("Node stress (all nodes)", ["variant", "tables mean", "tables median",
                                            "tables max", "entries mean", "entries median",
                                            "entries max"],
                [[v, *(_fmt(d[m][k]) for m in ("children_tables", "children_entries")
                       for k in ("mean", "median", "max"))] for v, d in ns.items()]))
    ls = summary.get("link_stress") or {}
    out.append(("Link stress (non-zero links)", ["traffic", "total", "mean", "median", "max",
                                                 "links", "links non-zero", "note"],
                [[t, *(_fmt(d.get(k)) for k in ("total", "mean", "median", "max", "links",
                                                 "links_nonzero")), d.get("note", "")]
                 for t, d in ls.items()]))
    ch = summary.get("churn") or {}
    variants = {v: d for v, d in ch.items() if isinstance(d, dict)}
    if variants:
        cols = ["ratio", "min_bucket_ratio", "duplicates", "out_of_order", "p99_delay_us",
                "outages", "outage_median_us", "rp_failures", "rp_failovers", "failover_mean_us",
                "failover_max_us", "died_expected", "died_received"]
        out.append((f"Delivery under churn (buckets of {_fmt(ch.get('bucket_us'))} us, "
                    f"messages from {ch.get('publishes_from')})", ["variant", *cols],
                    [[v, *(_fmt(d.get(k)) for k in cols)] for v, d in variants.items()]))
    ov = summary.get("overlay") or {}
    out.append(("Overlay", list(ov), [[_fmt(v) for v in ov.values()]]))
    timing = summary.get("timing") or {}
    out.append(("Timing (s)", ["phase", "seconds"], [[k, _fmt(v)] for k, v in timing.items()]))
    return out


def render_md(title: str, sections: list[Section], figures: list[tuple[str, str]],
              tail: list[str] | None = None) -> str:
    """Markdown: title, sections (notes then table), figures (path, caption), tail lines."""
    md = [f"# {title}", ""]
    for sec in sections:
        md += [f"## {sec.title}", ""]
        md += [*(f"{n}\n" for n in sec.notes)]
        if sec.header:
            md += ["| " + " | ".join(sec.header) + " |", "|" + "---|" * len(sec.header)]
            md += ["| " + " | ".join(r) + " |" for r in sec.rows]
            md.append("")
    if figures:
        md += ["## Figures", ""]
        md += [f"![{cap}]({f})\n\n*{cap}*\n" for f, cap in figures]
    return "\n".join(md + (tail or [])) + "\n"


_CSS = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:auto;padding:0 1em;"
        "color:#222}h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:"
        "1px solid #ddd}table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid "
        "#ccc;padding:3px 8px}th{background:#f3f3f3;text-align:left}td{text-align:right}"
        "td:first-child{text-align:left}p.note{color:#444;margin:.3em 0}figure{margin:1em 0}"
        "img{max-width:100%;height:auto;border:1px solid #eee}figcaption{color:#555;"
        "font-style:italic}pre{background:#f7f7f7;padding:.5em;overflow-x:auto}")


def render_html(title: str, sections: list[Section], figures: list[tuple[Path, str]],
                tail_html: str = "") -> str:
    """A self-contained HTML page: figures (file path, caption) embedded as base64 PNG."""
    h = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
         f"</title><style>{_CSS}</style></head><body>", f"<h1>{html.escape(title)}</h1>"]
    for sec in sections:
        h.append(f"<h2>{html.escape(sec.title)}</h2>")
        h += [f"<p class='note'>{html.escape(n)}</p>" for n in sec.notes]
        if sec.header:
            h.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in sec.header)
                     + "</tr>")
            h += ["<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>"
                  for r in sec.rows]
            h.append("</table>")
    if figures:
        h.append("<h2>Figures</h2>")
    for path, cap in figures:
        data = base64.b64encode(Path(path).read_bytes()).decode()
        h.append(f"<figure><img src='data:image/png;base64,{data}' alt='{html.escape(cap)}'>"
                 f"<figcaption>{html.escape(cap)}</figcaption></figure>")
    h.append(tail_html + "</body></html>")
    return "\n".join(h)


def write_atomic(path: Path, text: str) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def report_sections(summary: dict) -> list[Section]:
    """Beside the paper (paper scenarios), the key figures, their spread across
    topologies (a long table: after the key figures), timing."""
    tables = [Section(t, h, r) for t, h, r in _tables(summary)]
    timing = [s for s in tables if s.title.startswith("Timing")]
    paper = beside_paper_section(summary)
    return ([paper] if paper else []) + [s for s in tables if s not in timing] + [
        spread_section(summary)] + timing


def write_report(run_dir: str | Path) -> tuple[Path, Path]:
    """Write RUN_DIR/report.md (figures linked) and report.html (figures embedded)."""
    run_dir = Path(run_dir)
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        raise ValueError(f"{summary_path} is missing: run the analysis first")
    summary = json.loads(summary_path.read_text())
    config = (run_dir / "config.toml").read_text() if (run_dir / "config.toml").is_file() else ""
    say = translator(run_dir)     # labels in the run's vocabulary (groups or topics)
    title = say(f"scribe-emu run {run_dir.name}: {summary.get('scenario')}, "
                f"{_fmt(summary.get('nodes'))} nodes, {_fmt(summary.get('groups'))} groups, "
                f"{summary.get('topologies')} topolog"
                f"{'y' if summary.get('topologies') == 1 else 'ies'}")
    sections = [Section(say(s.title), [say(h) for h in s.header], s.rows,
                        [say(n) for n in s.notes]) for s in report_sections(summary)]
    marked = published.figure_marks(summary.get("scenario"))
    figures = []
    for f, cap in FIGURES:
        if (run_dir / "figures" / f).is_file():
            stem = f.removesuffix(".png")
            if any(k.split(":")[0] == stem for k in marked):
                cap += f" (black: published values, {published.source()['short']})"
            figures.append((f, say(cap)))
    md = render_md(title, sections, [(f"figures/{f}", cap) for f, cap in figures],
                   ["## Configuration", "", "```toml", config.rstrip(), "```", "",
                    "CSV files: `metrics/` (schemas in docs/analysis.md)."])
    page = render_html(title, sections, [(run_dir / "figures" / f, cap) for f, cap in figures],
                       f"<h2>Configuration</h2><pre>{html.escape(config)}</pre>")
    return (write_atomic(run_dir / "report.md", md),
            write_atomic(run_dir / "report.html", page))
