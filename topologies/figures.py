"""Figures of a topology as PNG files (matplotlib, Agg backend)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import TopologyError
from .graph import EDGE_CLASS_NAMES

_COLOURS = ("tab:red", "tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:gray")


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_layout(topo, path) -> Path:
    """Routers at their plane positions, core links coloured by class, transit routers
    marked. Raises TopologyError when the topology has no positions."""
    from matplotlib.collections import LineCollection
    g = topo.graph
    if g.router_xy is None:
        raise TopologyError(f"topology {g.name!r} has no router positions to draw")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 8))
    xy = g.router_xy
    for c in np.unique(g.edge_class):
        sel = g.edge_class == c
        segs = np.stack([xy[g.edge_src[sel]], xy[g.edge_dst[sel]]], axis=1)
        ax.add_collection(LineCollection(segs, colors=_COLOURS[c], linewidths=0.4,
                                         label=f"{EDGE_CLASS_NAMES[c]} ({sel.sum()})"))
    ax.scatter(xy[~g.router_is_transit, 0], xy[~g.router_is_transit, 1], s=2, c="k")
    ax.scatter(xy[g.router_is_transit, 0], xy[g.router_is_transit, 1], s=18, c="tab:red",
               marker="s", label="transit router")
    ax.autoscale()
    ax.set_aspect("equal")
    ax.set_title(f"{g.name}: {g.n_routers} routers, {g.n_edges} links")
    ax.legend(loc="upper right", fontsize=7)
    path = Path(path)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_delay_distribution(topo, path, n_pairs: int = 200_000, seed: int = 0) -> Path:
    """Histograms of core-link delays and of host-to-host latency (random host pairs)."""
    plt = _pyplot()
    rng = np.random.default_rng(seed)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    if topo.n_edges:
        axes[0].hist(topo.edge_delay_us / 1000, bins=60, color="tab:blue")
        axes[0].set_title(f"core link delay (mean {topo.edge_delay_us.mean() / 1000:.1f} ms)")
    else:
        axes[0].set_title("no core links (latency matrix)")
    axes[0].set_xlabel("ms")
    if topo.n_hosts >= 2:
        a = rng.integers(0, topo.n_hosts, n_pairs)
        b = rng.integers(0, topo.n_hosts, n_pairs)
        lat = topo.latency(a[a != b], b[a != b]) / 1000
        axes[1].hist(lat, bins=80, color="tab:green")
        axes[1].set_title(f"host-to-host latency (mean {lat.mean():.0f} ms)")
    axes[1].set_xlabel("ms")
    fig.suptitle(topo.name)
    path = Path(path)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
