"""BENCHMARKS.md's tables, rendered from the benchmarks' own records (benchmarks/results/*.json).

    python benchmarks/report.py          # rewrite BENCHMARKS.md's tables (make bench-report)
    python benchmarks/report.py --check  # exit 1 if BENCHMARKS.md is not what the records give
    python benchmarks/report.py from-run RUN_DIR --record NAME [--command "python cli.py ..."]
                                         # a scenario run's summary.json into its record

A record is one measurement: what was run (``command``), on what ``machine``, at which
``commit`` and ``date``, and its ``figures`` (numbers, or lists of numbers for several runs).
It names the page ``section`` it belongs to and the ``rows`` it shows there: each row a
``title``, a ``display`` (a format string over the figures: ``{name}``; a list prints as
"a, b", a figure whose name ends in ``_range`` as "a-b", a figure the record lacks as
"n/a") and optionally a ``target``
(``text``, and ``figure`` / ``op`` / ``value`` to judge it: met when every run meets it;
``verdict``: what to print while that figure is missing). A row may carry its own
``measured`` (commit, date, machine, source, command) when it was measured apart from the record's
other rows; a new run of the benchmark drops those. ``source`` says where the figures come
from: "transcribed ..." for the records carried over from the old diary of BENCHMARKS.md
(its last version is commit 44f380f), "measured" for a benchmark's own output.

The benchmarks write their record with ``--json PATH`` (``write_record`` below): the
figures, command, machine, commit and date are replaced, the page layout (section, rows,
targets) of a record already at PATH is kept. The page's tables sit between
``<!-- report:NAME -->`` and ``<!-- /report -->`` markers; everything else on the page is
written by hand.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import platform
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "BENCHMARKS.md"
END = "<!-- /report -->"
OPS = {"<=": lambda x, v: x <= v, ">=": lambda x, v: x >= v,
       "<": lambda x, v: x < v, ">": lambda x, v: x > v}


# ---- writing records (the benchmarks call this) ------------------------------------------

def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def this_machine() -> dict:
    """The machine a benchmark runs on: cores, memory, OS, Python; named by its host name."""
    ram = 0.0
    try:
        with open("/proc/meminfo") as f:
            ram = int(f.readline().split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    osname = platform.system()
    try:
        with open("/etc/os-release") as f:
            osname = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line
                          ).get("PRETTY_NAME", osname).strip('"')
    except OSError:
        pass
    desc = (f"{os.cpu_count()} cores ({platform.machine()}), {ram:.0f} GB RAM, {osname}, "
            f"Python {platform.python_version()}")
    return {"name": platform.node() or "unknown", "description": desc}


def command_line(argv: list[str] | None = None) -> str:
    """The benchmark's command as the user typed it, less its ``--json PATH``."""
    argv = list(sys.argv if argv is None else argv)
    out, skip = [], False
    for a in argv[1:]:
        if skip:
            skip = False
            continue
        if a == "--json":
            skip = True
            continue
        if a.startswith("--json="):
            continue
        out.append(a)
    script = Path(argv[0]).resolve()
    try:
        script = script.relative_to(ROOT)
    except ValueError:
        pass
    return shlex.join(["python", str(script), *out])


def add_json_option(ap: argparse.ArgumentParser, record: str | None = None,
                    what: str = "the figures") -> None:
    """A benchmark's ``--json PATH`` option: write `what` as a record of this module
    (`write_record`); ``record`` names the file under benchmarks/results/ it refreshes."""
    example = f" (e.g. benchmarks/results/{record})" if record else ""
    ap.add_argument("--json", type=Path, default=None, metavar="PATH",
                    help=f"write {what} as a record of benchmarks/report.py{example}")


def write_record(path: Path | str, workload: str, figures: dict, *, command: str | None = None,
                 title: str | None = None, display: str | None = None,
                 commit: str | None = None, date: str | None = None) -> dict:
    """Write (or refresh) the record at ``path`` from a run made now, here, at HEAD.

    Keeps the page layout of a record already there (section, order, rows and their
    targets, without the rows' own ``measured``); a new record gets one row showing every
    scalar figure. Returns the record."""
    path = Path(path)
    old = json.loads(path.read_text()) if path.exists() else {}
    figures = _rounded(figures)
    dirty = False if commit else bool(_git("status", "--porcelain", "--untracked-files=no"))
    commit = commit or _git("rev-parse", "--short", "HEAD") or "unknown"
    rec = {
        "workload": old.get("workload", workload),
        "section": old.get("section", "other"),
        "order": old.get("order", 1000),
        "command": command or command_line(),
        "machine": this_machine(),
        "commit": commit,
        "dirty": dirty,
        "date": date or datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        "load": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "source": "measured by the benchmark's --json",
        "figures": figures,
    }
    # a row measured apart from the others goes when this run does not fill it (its
    # figures were another benchmark's); the others stay, shown as they can be
    rows = [{k: v for k, v in r.items() if k != "measured"} for r in old.get("rows", [])
            if "measured" not in r or _renders(r, figures)]
    if not rows:
        scalars = [k for k, v in figures.items() if _is_number(v)]
        rows = [{"title": title or workload,
                 "display": display or ", ".join(f"{k} {{{k}}}" for k in scalars[:8])}]
    rec["rows"] = rows
    if "from_run" in old:
        rec["from_run"] = old["from_run"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"record written: {path}")
    return rec


def _rounded(v):
    """Figures as a table would print them: 4 significant digits at least, 3 decimals."""
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_rounded(x) for x in v]
    if isinstance(v, float):
        return round(v, 3) if abs(v) < 1000 else round(v, 1)
    return v


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# ---- scenario runs ---------------------------------------------------------------------

def from_run(run_dir: Path, name: str, command: str | None, commit: str | None = None) -> dict:
    """Refresh record ``name`` from a scenario run directory's summary.json. The record's
    ``from_run`` maps each figure to the summary values it sums: ``timing:KEY`` (glob
    allowed, ``-timing:KEY`` left out) or ``emulation:PHASE`` (the phase's emulation
    seconds, the runner's phase statistics). The date is the summary's (its file's time);
    a run directory does not record the code, so ``commit`` (default HEAD) says it."""
    path = RESULTS / f"{name}.json"
    old = json.loads(path.read_text())
    spec = old.get("from_run")
    if not spec:
        raise SystemExit(f"{path}: no from_run mapping; this record is not a scenario run's")
    summary = json.loads((run_dir / "summary.json").read_text())
    timing = summary.get("timing", {})
    phases = summary.get("emulation", {}).get("phases", {})
    figures = {}
    for fig, parts in spec.items():
        total, missing = 0.0, []
        for part in parts:
            sign = -1 if part.startswith("-") else 1
            kind, _, key = part.lstrip("-").partition(":")
            if kind == "timing":
                keys = [k for k in timing if fnmatch(k, key)]
                vals = [timing[k] for k in keys]
            elif kind == "emulation":
                vals = [phases[key]["emulation_s"]] if key in phases else []
            else:
                raise SystemExit(f"{path}: from_run part {part!r}: timing: or emulation:")
            if not vals and sign > 0:
                missing.append(part)
            total += sign * sum(vals)
        if not missing:
            figures[fig] = round(total, 2)
    written = datetime.fromtimestamp((run_dir / "summary.json").stat().st_mtime, UTC)
    return write_record(path, old["workload"], figures, command=command or old.get("command"),
                        commit=commit, date=written.strftime("%Y-%m-%d %H:%M"))


# ---- rendering -------------------------------------------------------------------------

def _fmt_one(v) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        s = format(v, ",")
        return s[:-2] if s.endswith(".0") else s
    return str(v)


def _fmt(name: str, v) -> str:
    if isinstance(v, list):
        sep = "-" if name.endswith("_range") else ", "
        return sep.join(_fmt_one(x) for x in v)
    return _fmt_one(v)


def _lookup(figures: dict, key: str):
    """A figure by name; ``X`` and ``X_range`` stand in for each other (a transcribed range
    of runs against a benchmark's own list of runs)."""
    if key in figures:
        return figures[key]
    alt = key[:-len("_range")] if key.endswith("_range") else key + "_range"
    return figures[alt]


class _Figures(dict):
    def __init__(self, figures: dict, missing: str | None = None):
        super().__init__()
        self.figures = figures
        self.missing = missing     # what a figure the record lacks prints as (None: raise)

    def __missing__(self, key):
        try:
            _lookup(self.figures, key)
        except KeyError:
            if self.missing is None:
                raise
            return self.missing
        name = key if key in self.figures else (
            key[:-len("_range")] if key.endswith("_range") else key + "_range")
        return _fmt(name, self.figures[name])


def _renders(row: dict, figures: dict) -> bool:
    try:
        row["display"].format_map(_Figures(figures))
        return True
    except (KeyError, IndexError, ValueError):
        return False


def render_display(row: dict, figures: dict) -> str:
    try:
        return row["display"].format_map(_Figures(figures, missing="n/a"))
    except (IndexError, ValueError):
        scal = [f"{k} {_fmt(k, v)}" for k, v in figures.items()
                if _is_number(v) or (isinstance(v, list) and all(_is_number(x) for x in v))]
        return "; ".join(scal[:6])


def verdict(target: dict, figures: dict) -> str:
    """"met", "missed", "met in i of n runs", or the target's own verdict text while its
    figure is missing."""
    fig = target.get("figure")
    try:
        got = _lookup(figures, fig) if fig else None
    except KeyError:
        got = None
    if got is not None and target.get("op") in OPS:
        vals = got if isinstance(got, list) else [got]
        ok = [OPS[target["op"]](x, target["value"]) for x in vals if _is_number(x)]
        if ok and all(ok):
            return "met"
        if ok and not any(ok):
            return "missed"
        if ok:
            return f"met in {sum(ok)} of {len(ok)} runs"
    return target.get("verdict", "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_section(records: list[dict], section: str) -> str:
    lines = ["| workload | figure | target | command | machine | commit, date |",
             "|---|---|---|---|---|---|"]
    for rec in records:
        if rec.get("section") != section:
            continue
        for row in rec["rows"]:
            # a row measured apart says so: its own commit, date, machine, source, command
            m = {**{k: rec.get(k) for k in ("commit", "date", "machine", "source", "command")},
                 **row.get("measured", {})}
            tgt = ""
            for t in ([row["target"]] if isinstance(row.get("target"), dict)
                      else row.get("target", [])):
                v = verdict(t, rec["figures"])
                tgt += ("; " if tgt else "") + t["text"] + (f": **{v}**" if v else "")
            when = f"`{m['commit']}`" + ("+" if rec.get("dirty") and "measured" not in row
                                         else "")
            when += f", {m['date']}" + (" (t)" if str(m.get("source", "")).startswith(
                "transcribed") else "")
            lines.append("| " + " | ".join(_cell(x) for x in (
                row["title"], render_display(row, rec["figures"]), tgt or "-",
                f"`{m['command']}`", m["machine"]["name"], when)) + " |")
    return "\n".join(lines)


def render_machines(records: list[dict]) -> str:
    seen: dict[str, str] = {}
    for rec in records:
        for m in [rec["machine"], *(r["measured"]["machine"] for r in rec["rows"]
                                    if "machine" in r.get("measured", {}))]:
            seen.setdefault(m["name"], m["description"])
    lines = ["| machine | description |", "|---|---|"]
    lines += [f"| {name} | {_cell(desc)} |" for name, desc in sorted(seen.items())]
    return "\n".join(lines)


def load_records() -> list[dict]:
    recs = []
    for p in sorted(RESULTS.glob("*.json")):
        rec = json.loads(p.read_text())
        missing = [k for k in ("workload", "section", "command", "machine", "commit", "date",
                               "figures", "rows", "source") if k not in rec]
        if missing:
            raise SystemExit(f"{p}: missing {', '.join(missing)}")
        rec["_file"] = p.name
        recs.append(rec)
    return sorted(recs, key=lambda r: (r.get("order", 1000), r["_file"]))


def render_page(text: str, records: list[dict]) -> str:
    """The page with every ``<!-- report:NAME -->`` ... ``<!-- /report -->`` block
    rendered; NAME is a section of the records, or ``machines``."""
    out, pos = [], 0
    while True:
        start = text.find("<!-- report:", pos)
        if start < 0:
            out.append(text[pos:])
            return "".join(out)
        head_end = text.index("-->", start) + 3
        name = text[start + len("<!-- report:"):head_end - 3].strip()
        end = text.index(END, head_end)
        body = render_machines(records) if name == "machines" else render_section(records, name)
        out.append(text[pos:head_end] + "\n" + body + "\n")
        pos = end


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 (with a diff) if BENCHMARKS.md is not what the records give")
    ap.add_argument("--page", type=Path, default=PAGE)
    sub = ap.add_subparsers(dest="cmd")
    fr = sub.add_parser("from-run", help="a scenario run's summary.json into its record")
    fr.add_argument("run_dir", type=Path)
    fr.add_argument("--record", required=True, help="benchmarks/results/NAME.json")
    fr.add_argument("--command", default=None, help="the command that made the run")
    fr.add_argument("--commit", default=None,
                    help="the code the run was made with (default: HEAD, the tree as it is)")
    a = ap.parse_args(argv)
    if a.cmd == "from-run":
        from_run(a.run_dir, a.record, a.command, a.commit)
        a.check = False
    text = a.page.read_text()
    records = load_records()
    new = render_page(text, records)
    for sec in sorted({r["section"] for r in records}):
        if f"<!-- report:{sec} -->" not in text:
            print(f"warning: no <!-- report:{sec} --> block on the page for "
                  f"{', '.join(r['_file'] for r in records if r['section'] == sec)}",
                  file=sys.stderr)
    if a.check:
        if new != text:
            sys.stdout.writelines(difflib.unified_diff(
                text.splitlines(True), new.splitlines(True), str(a.page), "rendered"))
            print(f"\n{a.page} is not what benchmarks/results/*.json give: "
                  "run `make bench-report`", file=sys.stderr)
            return 1
        print(f"{a.page}: the tables match benchmarks/results/*.json")
        return 0
    if new != text:
        a.page.write_text(new)
        print(f"{a.page}: tables rendered from {len(records)} records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
