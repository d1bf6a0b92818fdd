"""A run's directory: choosing and creating it, its state.json (what is done, for
--resume), its run.log, the event-log layout it keeps, and the message that says how to
resume it.

Files are written in an order that never makes a half-done run look complete: `COMPLETE`
comes last (scenarios/runner.py).
"""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime
from pathlib import Path

import numpy as np

from .config import ScenarioConfig, ScenarioError, load_scenario
from .event_logs import RunEvents, layout_for
from .progress import log, warn


class RunStopped(RuntimeError):
    """The run stopped for a reason outside its inputs (a shard lost more often than
    run.retries allows, a full or read-only disk). Completed phases are kept; the message
    (one line) ends with the command that resumes the run."""

    def __init__(self, message: str, run_dir: Path, remedy: str | None = None):
        self.run_dir = Path(run_dir)
        remedy = remedy or f"resume with: {resume_command(run_dir)}"
        super().__init__(f"{message}; completed phases are kept, {remedy}")


def resume_command(run_dir: Path) -> str:
    """The command line that continues the run in `run_dir`."""
    return f"python cli.py scenario --resume {run_dir}"


def scenario_to_run(cfg, out: Path | None, resume: Path | None) -> ScenarioConfig:
    """The validated configuration: the resumed run's config.toml, or `cfg` (a config or a
    scenario name) for a new run whose --out must be new or empty."""
    if resume is not None:
        run_dir = Path(resume)
        if not (run_dir / "config.toml").is_file():
            raise ScenarioError(f"cannot resume {run_dir}: no config.toml there (not a run "
                                "directory)")
        if (run_dir / "COMPLETE").exists():
            raise ScenarioError(f"run {run_dir} is already complete; nothing to resume")
        resumed = load_scenario(str(run_dir / "config.toml"))
        if isinstance(cfg, ScenarioConfig) and cfg != resumed:
            # the run continues as it started; other options would change its results
            log.warning("resume: using %s/config.toml, not the options given now", run_dir)
        return resumed
    if isinstance(cfg, str):
        cfg = load_scenario(cfg)
    if not isinstance(cfg, ScenarioConfig):
        raise ScenarioError("run_scenario needs a ScenarioConfig (from load_scenario) or a "
                            "scenario name")
    if out is not None and Path(out).exists() and any(Path(out).iterdir()):
        raise ScenarioError(f"output directory {out} exists and is not empty; choose "
                            "another --out or use --resume to continue it")
    return cfg


def new_run_dir(cfg: ScenarioConfig, out: Path | None) -> Path:
    """The new run's directory, created: `out` (new or empty), else runs/<name>-<time>."""
    if out is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = Path("runs") / f"{cfg.name}-{stamp}"
        k = 1
        while run_dir.exists():            # two runs in one second
            k += 1
            run_dir = Path("runs") / f"{cfg.name}-{stamp}-{k}"
    else:
        run_dir = Path(out)
        if run_dir.exists() and any(run_dir.iterdir()):
            raise ScenarioError(f"output directory {run_dir} exists and is not empty; choose "
                                "another --out or use --resume to continue it")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


class RunState:
    """state.json: completed phases per topology, timings, counters (survives a crash)."""

    def __init__(self, path: Path):
        self.path = path
        self.d = json.loads(path.read_text()) if path.is_file() else {
            "completed": {}, "topologies_done": [], "timing": {}, "phases": {},
            "quality": {}, "counters": {}, "resumed": 0}

    def save(self):
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.d, indent=1, default=_json_default))
        os.replace(tmp, self.path)

    def completed(self, t: int) -> list[str]:
        return list(self.d["completed"].get(str(t), []))

    def add_time(self, key: str, seconds: float):
        self.d["timing"][key] = round(self.d["timing"].get(key, 0.0) + float(seconds), 3)


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


class RunLogHandler(logging.FileHandler):
    """run.log; a write that fails (full disk) is dropped quietly rather than printing a
    logging traceback: the run's own writes report the problem in one line."""

    def handleError(self, record):  # noqa: N802 - logging's name
        pass


def open_run_log(run_dir: Path) -> logging.Handler:
    """Send the run's logger (scenarios/progress.py) to run_dir/run.log; the caller removes
    and closes the returned handler when the run ends."""
    try:
        h = RunLogHandler(run_dir / "run.log")
    except OSError as e:
        raise RunStopped(f"cannot write {run_dir / 'run.log'}: {e.strerror or e}",
                         run_dir) from None
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False
    return h


def open_events(cfg, run_dir: Path, state: RunState, resumed: bool) -> RunEvents:
    """The run's event-log layout (event_logs.py): recorded in state.json at the start, kept
    on resume. A resumed hand-off run starts its emulation again: its logs lived in the
    object store of the process that stopped (same results, the time is lost)."""
    if resumed:
        state.d["resumed"] = state.d.get("resumed", 0) + 1
    layout = layout_for(cfg.run, state.d.get("event_logs"))
    if resumed and layout.handoff and state.d["completed"]:
        warn("resume: this run handed its event logs to Spark through the object store "
             "(no run.storage), and they ended with the process that stopped; its "
             "emulation starts again (name a run.storage to resume from checkpoints)")
        for key in ("completed", "phase_end", "phases", "quality", "counters",
                    "churn_schedule"):
            state.d[key] = {}
        state.d["topologies_done"] = []
    state.d["event_logs"] = layout.as_dict()
    state.save()
    log.info("event logs: %s", "object store (hand-off to Spark)" if layout.handoff else
             f"Parquet under {layout.storage or run_dir}")
    return RunEvents(run_dir, layout)


def has_work(run_dir: Path, started: bool) -> bool:
    """Whether a failed new run did something worth keeping (a completed phase, whatever
    the layout, or event files under the run directory)."""
    return started or (run_dir / "events").is_dir() and any((run_dir / "events").iterdir())

