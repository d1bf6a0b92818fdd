"""What a scenario run tells its user while it runs: the run's logger (written to run.log,
scenarios/run_dir.py), warnings (run.log and one line on stderr) and the status line."""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("scribe_emu.scenario")


def warn(message: str) -> None:
    """A warning of ours: in run.log and, one line, on the console (stderr)."""
    log.warning(message)
    print(f"warning: {message}", file=sys.stderr, flush=True)


class Progress:
    """One status line (rich) with phase, virtual time and message rate; no-op when off."""

    def __init__(self, enabled: bool, n_topos: int):
        self.enabled = enabled
        self.n_topos = n_topos
        self._p = None
        self.topo = 0
        self._t0 = time.perf_counter()

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
            self._p = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                               TimeElapsedColumn(), console=Console(stderr=True),
                               transient=False)
            self._p.__enter__()
            self._task = self._p.add_task("starting", total=None)
        return self

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)

    def status(self, text: str):
        log.info(text)
        if self._p is not None:
            self._p.update(self._task, description=text)

    def start_phase(self):
        self._t0 = time.perf_counter()

    def __call__(self, phase: str, virtual_us: int, messages: int):
        if self._p is None:
            return
        dt = max(time.perf_counter() - self._t0, 1e-9)
        self._p.update(self._task, description=(
            f"topology {self.topo + 1}/{self.n_topos}  {phase:<20} "
            f"virtual {virtual_us / 1e6:9.3f} s"
            f"  {messages:>12,} msgs  {messages / dt:>10,.0f} msg/s"))

