"""The paper's published figures beside a run's: rows for the report and the console, and
marks for the figures the paper also drew. The figures live in analysis/published.toml,
which cites its source (Castro et al., JSAC 2002, section IV)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from analysis.headline import value_at
from analysis.spread import spread_at

DATA = Path(__file__).with_name("published.toml")


@dataclass(frozen=True)
class Published:
    """One published figure, its path in summary.json (`over`: the figure is a ratio)."""
    label: str
    key: tuple[str, ...]
    value: float
    over: tuple[str, ...] | None = None
    approx: bool = False
    mark: str | None = None
    stat: str | None = None
    mark_label: str | None = None


@dataclass(frozen=True)
class Beside:
    """A row of the beside-the-paper table."""
    label: str
    ours: float | None
    published: float
    approx: bool
    ci95: tuple[float, float] | None   # of ours, across topologies (None: one sample)

    @property
    def ratio(self) -> float | None:
        return None if self.ours is None or not self.published else self.ours / self.published


@lru_cache(maxsize=4)
def load(path: Path = DATA) -> dict:
    return tomllib.loads(path.read_text())


def source(data: dict | None = None) -> dict:
    """{"citation", "short", "averaged_over"} of the published figures."""
    return dict((data or load())["source"])


def scenario_entry(scenario: str | None, data: dict | None = None) -> dict | None:
    """The data file's entry for a scenario name: exact match, else the longest name
    declared with prefix = true that starts it; None when the paper has no such figures."""
    if not scenario:
        return None
    entries = (data or load()).get("scenario", {})
    if scenario in entries:
        return entries[scenario]
    found = [n for n, e in entries.items() if e.get("prefix") and scenario.startswith(n)]
    return entries[max(found, key=len)] if found else None


def figures_for(scenario: str | None, data: dict | None = None) -> list[Published]:
    """The published figures of a scenario, keys resolved for its tree variant."""
    data = data or load()
    entry = scenario_entry(scenario, data)
    if entry is None:
        return []
    base = data["scenario"][entry["same_as"]] if "same_as" in entry else entry
    variant, skip = entry.get("variant", "scribe"), set(entry.get("skip", []))

    def path(text: str) -> tuple[str, ...]:
        return tuple(text.replace("{variant}", variant).split("."))

    return [Published(label=f["label"], key=path(f["key"]), value=float(f["value"]),
                      over=path(f["over"]) if "over" in f else None,
                      approx=bool(f.get("approx")), mark=f.get("mark"), stat=f.get("stat"),
                      mark_label=f.get("mark_label"))
            for f in base.get("figures", []) if f["label"] not in skip]


def beside_paper(summary: dict, data: dict | None = None) -> list[Beside]:
    """One row per published figure of the run's scenario (empty when the paper has none)."""
    rows = []
    for f in figures_for(summary.get("scenario"), data):
        ours = value_at(summary, f.key)
        ci = None
        if f.over is not None:
            below = value_at(summary, f.over)
            ours = ours / below if ours is not None and below else None
        else:
            sp = spread_at(summary, f.key)
            if sp and sp.get("ci95_low") is not None:
                ci = (sp["ci95_low"], sp["ci95_high"])
        rows.append(Beside(f.label, None if ours is None else float(ours), f.value,
                           f.approx, ci))
    return rows


def setup_notes(summary: dict, data: dict | None = None, short: bool = False) -> list[str]:
    """Sentences that qualify the comparison: the source (`short`: its short name), how
    many samples each side has, and where this run's set-up differs from the paper's."""
    data = data or load()
    entry = scenario_entry(summary.get("scenario"), data)
    if entry is None:
        return []
    src = source(data)
    n = summary.get("topologies")
    samples = (summary.get("spread") or {}).get("samples", n)
    cited = f"{src['short']}, section IV" if short else src["citation"]
    notes = [f"Published: {cited}; averages over {src['averaged_over']}.",
             f"This run: {samples} topolog{'y' if samples == 1 else 'ies'}"
             + (" (one sample: no confidence interval)." if samples == 1 else
                "; 95 % confidence interval of the mean across them (Student t).")]
    differs = [f"{k} {summary.get(k):,} (paper {entry[k]:,})" for k in ("nodes", "groups")
               if k in entry and isinstance(summary.get(k), int) and summary.get(k) != entry[k]]
    if differs:
        notes.append(f"Not the published set-up ({entry.get('setup', '')}): this run has "
                     + ", ".join(differs) + ".")
    if summary.get("bootstrap") == "oracle":
        notes.append("Not the published overlay: this run's Pastry tables were computed "
                     "(oracle bootstrap, every entry the nearest), the paper's were built "
                     "by Pastry's join; the computed tables give lower delay penalties "
                     "(docs/pastry.md).")
    if entry.get("note"):
        notes.append(entry["note"][0].upper() + entry["note"][1:] + ".")
    return notes


def figure_marks(scenario: str | None, data: dict | None = None) -> dict[str, list[tuple]]:
    """{figure: [(value, stat, label)]} for the figures of ours the paper also drew,
    e.g. {"delay_penalty_cdf": [(1.68, "median", "RAD median")]} (label: the legend's)."""
    marks: dict[str, list[tuple]] = {}
    for f in figures_for(scenario, data):
        if f.mark and f.over is None:
            marks.setdefault(f.mark, []).append((f.value, f.stat or "mean",
                                                 f.mark_label or f.label))
    return marks
