"""PNG figures of the metric distributions (matplotlib, Agg backend).

Every function takes small pandas frames already computed by Spark and writes one file.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# The paper's published figures (analysis/published.py: (value, stat, label) tuples) are
# drawn in black over ours: a median as a cross at 0.5 on a CDF, anything else as a line.
_MARK_STYLES = ["--", ":", "-.", (0, (5, 1, 1, 1))]
_MARKERS = ["X", "P", "D", "s"]


def _marks(ax, marks, cdf: bool) -> None:
    for i, (value, stat, label) in enumerate(marks or []):
        text = f"paper {label} = {value:,.4g}"
        if cdf and stat == "median":
            ax.plot([value], [0.5], marker=_MARKERS[i % len(_MARKERS)], ms=8, color="black",
                    ls="none", label=text, markeredgecolor="white", zorder=5)
        else:
            ax.axvline(value, color="black", lw=1.1, ls=_MARK_STYLES[i % len(_MARK_STYLES)],
                       label=text, zorder=5)
    lines = [v for v, stat, _ in marks or [] if not (cdf and stat == "median")]
    if lines:   # keep a line at the far right off the frame
        lo, hi = ax.get_xlim()
        room = max(lines) * 1.3 if ax.get_xscale() != "linear" else max(lines) + 0.05 * (
            max(lines) - lo)
        ax.set_xlim(right=max(hi, room))


def _legend(ax, **kw) -> None:
    if ax.get_legend_handles_labels()[0]:      # an empty panel gets no empty legend box
        ax.legend(fontsize="small", framealpha=0.85, **kw)


def _cdf(ax, values, label, **style):
    v = np.sort(np.asarray(values, dtype=float))
    v = v[np.isfinite(v)]
    if len(v):
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=label, **style)


_RUN_STYLES = ["-", "--", ":", "-."]


def _styles(series, kinds: int = 1) -> dict[str, list[dict]]:
    """Line styles per series label, `kinds` per series (e.g. RAD and RMD). Comparisons
    (analysis/compare.py) name series '<run>: <variant>': a variant then keeps its colours
    in every run and each run gets its own line style; other labels keep matplotlib's."""
    series = list(series)
    split = [str(s).split(": ", 1) for s in series]
    if not series or any(len(p) != 2 for p in split):
        return {s: [{}] * kinds for s in series}
    runs = list(dict.fromkeys(p[0] for p in split))
    variants = sorted({p[1] for p in split})
    return {s: [{"color": f"C{(variants.index(v) * kinds + k) % 10}",
                 "ls": _RUN_STYLES[runs.index(r) % len(_RUN_STYLES)]} for k in range(kinds)]
            for s, (r, v) in zip(series, split, strict=True)}


def _counts(part: pd.DataFrame, by: str, count: str, per_topology: bool) -> pd.Series:
    """Sum of `count` per `by` value over the topologies (or their mean per topology)."""
    agg = part.groupby(by)[count].sum().sort_index()
    return agg / part["topo"].nunique() if per_topology and "topo" in part else agg


def delay_penalty_cdf(by_group: pd.DataFrame, path: Path, marks=None) -> Path:
    """CDF over groups of RAD and RMD, per variant (all topologies pooled); `marks`: the
    published figures to draw over it."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    styles = _styles(sorted(by_group["variant"].unique()), kinds=2)
    for variant, part in by_group.groupby("variant", sort=True):
        _cdf(ax, part["rad"], f"RAD ({variant})", **styles[variant][0])
        _cdf(ax, part["rmd"], f"RMD ({variant})", **styles[variant][1])
    _marks(ax, marks, cdf=True)
    ax.set_xlabel("delay penalty (Scribe / IP multicast)")
    ax.set_ylabel("cumulative fraction of groups")
    ax.set_title("Delay penalty per group")
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


def rdp_cdf(rdp: pd.DataFrame, path: Path, marks=None) -> Path:
    """CDF over the members of the rank-1 group of RDP, per variant (+ published marks)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    styles = _styles(sorted(rdp["variant"].unique()))
    for variant, part in rdp.groupby("variant", sort=True):
        _cdf(ax, part["rdp"], variant, **styles[variant][0])
    _marks(ax, marks, cdf=True)
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("RDP (Scribe delay / IP delay)")
    ax.set_ylabel("cumulative fraction of members")
    ax.set_title("Relative delay penalty, rank-1 group")
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


def node_stress_distribution(hist: pd.DataFrame, path: Path, marks=None,
                             per_topology: bool = False) -> Path:
    """Nodes per number of children tables / children entries, per variant (log y), summed
    over the topologies (per_topology: their mean, to compare runs of different sizes).
    marks: {"node_stress:children_tables" | "node_stress:children_entries": [...]}."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    styles = _styles(sorted(hist["variant"].unique()))
    for ax, measure, xlabel in ((axes[0], "children_tables", "non-empty children tables"),
                                (axes[1], "children_entries", "children-table entries")):
        part = hist[hist["measure"] == measure]
        for variant, v in part.groupby("variant", sort=True):
            agg = _counts(v, "value", "nodes", per_topology)
            ax.plot(agg.index, agg.values, marker=".", label=variant, **styles[variant][0])
        ax.set_yscale("log")
        if measure == "children_entries":
            ax.set_xscale("symlog", linthresh=1)
            ax.set_xlim(left=-0.3)   # symlog would otherwise show an empty negative side
        _marks(ax, (marks or {}).get(f"node_stress:{measure}"), cdf=False)
        ax.set_xlabel(f"{xlabel} per node")
        ax.set_ylabel("nodes per topology (mean)" if per_topology else "number of nodes")
        ax.grid(alpha=0.3)
        _legend(ax)
    fig.suptitle("Node stress")
    return _save(fig, path)


def link_stress_distribution(hist: pd.DataFrame, path: Path, marks=None,
                             per_topology: bool = False) -> Path:
    """Links per non-zero stress value: Scribe traffic vs IP multicast vs naive unicast
    (+ published marks), summed over the topologies (per_topology: their mean)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    styles = _styles(sorted(hist["traffic"].unique()))
    for traffic, part in hist.groupby("traffic", sort=True):
        agg = _counts(part, "stress", "links", per_topology)
        # JOIN stress equals multicast stress by symmetry: draw it beneath, so both show
        under = {"zorder": 1.9, "ls": "--"} if traffic == "scribe_join" else {}
        ax.plot(agg.index, agg.values, marker=".", lw=1, label=traffic,
                **{**under, **styles[traffic][0]})
    ax.set_xscale("log")
    ax.set_yscale("log")
    _marks(ax, marks, cdf=False)
    ax.set_xlabel("link stress (packets per directed link, zeros omitted)")
    ax.set_ylabel("links per topology (mean)" if per_topology else "number of links")
    ax.set_title("Link stress")
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


def group_size_by_rank(groups: pd.DataFrame, path: Path) -> Path:
    """Group size against rank (log-log), per topology."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for topo, part in groups.groupby("topo", sort=True):
        part = part.sort_values("rank")
        ax.plot(part["rank"], part["size"], marker=".", ms=3, lw=0.8, label=f"topology {topo}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("group rank")
    ax.set_ylabel("group size (members)")
    ax.set_title("Group size vs rank")
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


def churn_delivery(buckets: pd.DataFrame, path: Path) -> Path:
    """Delivery ratio per time bucket of the multicast stream, per variant (topologies
    pooled: received / expected summed per bucket), with the dead nodes on a second axis."""
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    agg = buckets.groupby(["variant", "bucket"], sort=True).agg(
        start=("bucket_start_us", "min"), received=("received", "sum"),
        expected=("expected", "sum"), dead=("dead_nodes", "sum")).reset_index()
    for variant, part in agg.groupby("variant", sort=True):
        ratio = part["received"] / part["expected"].where(part["expected"] > 0)
        ax.step(part["start"] / 1e6, ratio, where="post", marker=".", label=variant)
    ax.set_xlabel("publish time (s, virtual)")
    ax.set_ylabel("delivery ratio (received / expected)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    dead = agg.groupby("bucket").agg(start=("start", "min"), dead=("dead", "max"))
    if dead["dead"].max() > 0:
        ax2 = ax.twinx()
        ax2.step(dead["start"] / 1e6, dead["dead"], where="post", color="grey", lw=0.8,
                 ls="--", label="dead nodes")
        ax2.set_ylabel("dead nodes at bucket start")
        ax2.legend(loc="lower right")
    ax.legend(loc="lower left")
    ax.set_title("Delivery under churn")
    return _save(fig, path)


def churn_failover(failovers: pd.DataFrame, path: Path) -> Path:
    """RP fail-over time per failed RP (first arrival of a message published after the
    failure, minus the failure time), per variant, with each variant's mean as a line;
    groups that never got a later message through are marked with an x at 0."""
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    f = failovers.sort_values(["variant", "topo", "failed_us", "group"])
    variants = sorted(f["variant"].unique())
    width = 0.8 / max(len(variants), 1)
    labels = None
    for i, (variant, part) in enumerate(f.groupby("variant", sort=True)):
        x = np.arange(len(part)) + i * width
        sec = part["failover_us"].astype(float) / 1e6
        bars = ax.bar(x, sec.fillna(0), width, label=variant)
        if sec.notna().any():
            ax.axhline(sec.mean(), color=bars.patches[0].get_facecolor(), lw=0.8, ls="--")
        miss = sec.isna().to_numpy()
        if miss.any():
            ax.plot(x[miss], np.zeros(miss.sum()), "x", color="black")
        labels = [f"g{g} @{t / 1e6:.1f}s" for g, t in zip(part["group"], part["failed_us"],
                                                         strict=True)]
    if labels:
        ax.set_xticks(np.arange(len(labels)) + width * (len(variants) - 1) / 2)
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("failed RP (group, failure time)")
    ax.set_ylabel("fail-over time (s)")
    ax.grid(alpha=0.3, axis="y")
    _legend(ax)
    ax.set_title("RP fail-over (dashed: mean)")
    return _save(fig, path)
