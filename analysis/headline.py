"""The headline figures of a run's summary.json: what the report's spread table and
`cli.py compare` put side by side, as (label, key path) pairs found in the summary."""

from __future__ import annotations

_DELAY = [("RAD median", ("rad", "p50")), ("RAD mean", ("rad", "mean")),
          ("RAD p90", ("rad", "p90")), ("RMD median", ("rmd", "p50")),
          ("RMD mean", ("rmd", "mean")), ("RMD p90", ("rmd", "p90"))]
_RDP = [("RDP rank-1 mean", ("mean",)), ("RDP rank-1 median", ("median",)),
        ("RDP rank-1 p98", ("p98",)), ("RDP rank-1 fraction < 1", ("frac_below_1",))]
_NODES = [(f"children {what} per node, {stat}", (f"children_{what}", stat))
          for what in ("tables", "entries") for stat in ("mean", "median", "max")]
_LINKS = [("link stress total", ("total",)), ("link stress mean", ("mean",)),
          ("link stress median", ("median",)), ("link stress max", ("max",))]
_CHURN = [("delivery ratio", ("ratio",)), ("delivery ratio, worst bucket", ("min_bucket_ratio",)),
          ("duplicates", ("duplicates",)), ("out of order", ("out_of_order",)),
          ("delay p99 (us)", ("p99_delay_us",)), ("outages", ("outages",)),
          ("RP fail-overs", ("rp_failovers",)), ("RP fail-over mean (us)", ("failover_mean_us",)),
          ("RP fail-over max (us)", ("failover_max_us",))]


def value_at(summary: dict, path: tuple[str, ...]):
    """The number at a key path of summary.json, or None."""
    node = summary
    for k in path:
        if not isinstance(node, dict) or k not in node:
            return None
        node = node[k]
    return node if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def headline_figures(summary: dict) -> list[tuple[str, tuple[str, ...]]]:
    """(label, key path) of every headline figure present in `summary`, in report order:
    delay penalty and RDP per variant, node stress per variant, link stress per traffic,
    Pastry hops, churn delivery per variant."""
    out: list[tuple[str, tuple[str, ...]]] = []

    def add(section: str, names: list):
        for sub, d in (summary.get(section) or {}).items():
            if isinstance(d, dict):
                out.extend((f"{label} ({sub})", (section, sub, *path)) for label, path in names)

    add("delay_penalty_by_variant", _DELAY)
    add("rdp_rank1_by_variant", _RDP)
    add("node_stress", _NODES)
    add("link_stress", _LINKS)
    out.append(("Pastry hops per route, mean", ("overlay", "mean_hops")))
    add("churn", _CHURN)
    return [(label, path) for label, path in out if value_at(summary, path) is not None]
