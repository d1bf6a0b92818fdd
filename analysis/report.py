"""report.md and report.html of a run: key figures, plots and the resolved configuration.

Reads only files of the run directory (summary.json, figures/, config.toml), so it runs
without Spark once `run_analysis` has written them.
"""

from __future__ import annotations

import base64
import html
import json
import os
from pathlib import Path

from analysis.vocabulary import translator

FIGURES = [("delay_penalty_cdf.png", "Delay penalty (RAD, RMD) over groups"),
           ("rdp_rank1_cdf.png", "RDP of the rank-1 group's members"),
           ("node_stress.png", "Node stress: children tables and entries per node"),
           ("link_stress.png", "Link stress: Scribe vs IP multicast vs naive unicast"),
           ("group_size_by_rank.png", "Group size vs rank"),
           ("churn_delivery.png", "Delivery ratio over time under churn")]


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


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
                "outages", "outage_median_us", "rp_failures", "rp_failovers", "failover_max_us"]
        out.append((f"Delivery under churn (buckets of {_fmt(ch.get('bucket_us'))} us, "
                    f"messages from {ch.get('publishes_from')})", ["variant", *cols],
                    [[v, *(_fmt(d.get(k)) for k in cols)] for v, d in variants.items()]))
    ov = summary.get("overlay") or {}
    out.append(("Overlay", list(ov), [[_fmt(v) for v in ov.values()]]))
    timing = summary.get("timing") or {}
    out.append(("Timing (s)", ["phase", "seconds"], [[k, _fmt(v)] for k, v in timing.items()]))
    return out


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
                f"{summary.get('nodes')} nodes, {summary.get('groups')} groups, "
                f"{summary.get('topologies')} topologies")
    tables = [(say(name), [say(h) for h in head], rows) for name, head, rows in _tables(summary)]
    figures = [(f, say(cap)) for f, cap in FIGURES if (run_dir / "figures" / f).is_file()]

    md = [f"# {title}", ""]
    for name, header, rows in tables:
        md += [f"## {name}", "", "| " + " | ".join(header) + " |",
               "|" + "---|" * len(header)]
        md += ["| " + " | ".join(r) + " |" for r in rows]
        md.append("")
    md += ["## Figures", ""]
    md += [f"![{cap}](figures/{f})\n\n*{cap}*\n" for f, cap in figures]
    md += ["## Configuration", "", "```toml", config.rstrip(), "```", "",
           "CSV files: `metrics/` (schemas in docs/analysis.md)."]

    head = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            "</title><style>body{font-family:sans-serif;max-width:1000px;margin:auto}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}"
            "</style></head><body>")
    h = [head, f"<h1>{html.escape(title)}</h1>"]
    for name, header, rows in tables:
        h.append(f"<h2>{html.escape(name)}</h2><table><tr>"
                 + "".join(f"<th>{html.escape(c)}</th>" for c in header) + "</tr>")
        h += ["<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>"
              for r in rows]
        h.append("</table>")
    h.append("<h2>Figures</h2>")
    for f, cap in figures:
        data = base64.b64encode((run_dir / "figures" / f).read_bytes()).decode()
        h.append(f"<figure><img src='data:image/png;base64,{data}' alt='{html.escape(cap)}'>"
                 f"<figcaption>{html.escape(cap)}</figcaption></figure>")
    h.append(f"<h2>Configuration</h2><pre>{html.escape(config)}</pre></body></html>")

    paths = []
    for name, text in (("report.md", "\n".join(md) + "\n"), ("report.html", "\n".join(h))):
        path = run_dir / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        paths.append(path)
    return paths[0], paths[1]
