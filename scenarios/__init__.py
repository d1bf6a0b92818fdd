"""Scenarios: a TOML config composes a topology, the emulator, Pastry+Scribe and the analysis.

``load_scenario`` validates a scenario (a name from scenarios/*.toml or a path) with its
overrides; ``run_scenario`` runs it into a run directory (docs/ARCHITECTURE.md).
The runner imports Ray and Spark, so it is loaded only when ``run_scenario`` is used.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import ScenarioConfig, ScenarioError, load_scenario, read_toml, scenario_files


@dataclass(frozen=True)
class ScenarioInfo:
    name: str
    description: str
    nodes: int
    groups: int
    topologies: int


def list_scenarios() -> list[ScenarioInfo]:
    """Every scenario shipped in scenarios/*.toml, by name (sizes as in the file)."""
    from .config import SCHEMA
    out = []
    for name, path in scenario_files().items():
        try:
            cfg = load_scenario(name)
            out.append(ScenarioInfo(name, cfg.description, cfg.nodes, cfg.groups,
                                    cfg.topologies))
        except ScenarioError as e:   # e.g. measured data absent: list it, say why
            raw = read_toml(path)
            run = {k: v[1] for k, v in SCHEMA["run"].items()} | raw.get("run", {})
            out.append(ScenarioInfo(name, f"{raw.get('description', '')} [unavailable: {e}]",
                                    run["nodes"], run["groups"], run["topologies"]))
    return out


def run_scenario(cfg, *, out=None, address=None, resume=None, progress=True, force=False):
    """Run a scenario; see :func:`scenarios.runner.run_scenario`."""
    from .runner import run_scenario as _run
    return _run(cfg, out=out, address=address, resume=resume, progress=progress, force=force)


__all__ = ["ScenarioConfig", "ScenarioError", "ScenarioInfo", "list_scenarios", "load_scenario",
           "read_toml", "run_scenario"]
