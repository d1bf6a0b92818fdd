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
    for rel, prefix in WarmRun.REMOVED:
        folder = cache / Path(rel).parent
        assert list(folder.glob(f"{prefix}*.nbi")), (folder, prefix)
        assert list(folder.glob(f"{prefix}*.nbc")), (folder, prefix)
