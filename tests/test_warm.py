"""`cli.py warm` (what `make run` does once per machine) runs the scenario's phases scaled
down in shard actors and leaves their kernels in numba's cache (the project's,
emulator/jit_cache.py).

It runs in the background (tests/conftest.py's WarmRun), at low priority, on a copy of the
session's kernel cache made of hard links, without two kernels' entries (the engine's and
Scribe's, cheap to compile): they must be there again afterwards, and no other process of
the session can put them back in that copy. (That the first run after it then compiles
nothing is measured in benchmarks, not here.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def warm_run(warm_kernels, tmp_path_factory) -> dict:
    from conftest import background
    return background("warm_run", tmp_path_factory).result()


@pytest.mark.late
def test_warm_runs_a_scenario_scaled_down_and_leaves_its_kernels_cached(warm_run):
    from conftest import WarmRun
    res, cache = warm_run["res"], Path(warm_run["cache"])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "kernels of quick compiled and cached" in res.stdout
    # on a terminal a status line names the step under way: minutes of it from an empty cache
    assert "compiling the protocol stack's kernels" in res.stdout
    assert "compiling what is left of quick's kernels" in res.stdout
    for rel, prefix in WarmRun.REMOVED:
        folder = cache / Path(rel).parent
        assert list(folder.glob(f"{prefix}*.nbi")), (folder, prefix)
        assert list(folder.glob(f"{prefix}*.nbc")), (folder, prefix)


def _signatures(folder: Path, prefix: str) -> list:
    """The signatures numba's cache index holds for the kernel whose entries start with
    ``prefix`` in ``folder`` (numba's index: its version, then (stamp, {(signature,
    target), ...: data file})). O(its overloads)."""
    import pickle
    (index,) = folder.glob(f"{prefix}*.nbi")
    with open(index, "rb") as f:
        pickle.load(f)
        _, overloads = pickle.loads(f.read())
    return [key[0] for key in overloads]


@pytest.mark.late
def test_the_loops_parts_compiled_ahead_are_those_the_loop_calls(warm_run):
    """The warm-up's second process compiles the stack loop's application part and the
    pass's end ahead (``StackCellLoop.compile_ahead``) for the loop's process to load:
    each has one signature in the cache, the one the composed loop looks up (whether the
    session or the warm-up's first process composed it). A second one would be a compile
    the loop never uses."""
    cache = Path(warm_run["cache"])
    parts = (("actors", "stack_loop.take_routed_run-"),
             ("actors", "stack_loop.take_join_request_run-"),
             ("actors", "stack_loop.take_create_request_run-"),
             ("actors/scribe", "cell_loop.take_runs-"),
             ("emulator", "window.end_pass-"))
    for folder, prefix in parts:
        assert len(_signatures(cache / folder, prefix)) == 1, prefix
