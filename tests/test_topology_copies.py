"""The machine-local copies of shipped topology files (analysis.physical.TopologyFiles):
an executor writes one per run and topology into its temporary directory; a new copy
prunes the stale copies of other runs, and a run whose copy was pruned writes it again."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import pytest

from analysis.physical import STALE_COPY_S, TopologyFiles, prune_local_copies


@dataclass
class Shipped:
    """What a task reads of a Spark broadcast variable: its value."""
    value: bytes


def npz_bytes(tmp_path, marker: int) -> bytes:
    path = tmp_path / f"src-{marker}.npz"
    np.savez(path, marker=np.array([marker]))
    return path.read_bytes()


def read_marker(path):
    with np.load(path) as z:
        return int(z["marker"][0])


@pytest.fixture
def tmpdir_here(tmp_path, monkeypatch):
    here = tmp_path / "machine-tmp"
    here.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(here))
    return here


def copies(here):
    return sorted(p.name for p in here.iterdir())


def test_a_new_copy_prunes_only_other_runs_stale_copies(tmp_path, tmpdir_here):
    old = time.time() - STALE_COPY_S - 60
    stale = tmpdir_here / "scribe-emu-aaaaaaaaaaaa-topo-0.npz"
    stale_tmp = tmpdir_here / "scribe-emu-aaaaaaaaaaaa-topo-1.npz.4242.tmp"
    recent = tmpdir_here / "scribe-emu-bbbbbbbbbbbb-topo-0.npz"
    own_old = tmpdir_here / "scribe-emu-cccccccccccc-topo-1.npz"
    unrelated = tmpdir_here / "scribe-emu-console-0.log"
    for f in (stale, stale_tmp, recent, own_old, unrelated):
        f.write_bytes(b"x")
    for f in (stale, stale_tmp, own_old, unrelated):
        os.utime(f, (old, old))

    files = TopologyFiles({0: "/driver-only/topo-0.npz"},
                          {0: Shipped(npz_bytes(tmp_path, 7))}, read_marker, "cccccccccccc")
    assert files.load(0) == 7
    assert copies(tmpdir_here) == sorted([recent.name, own_old.name, unrelated.name,
                                          "scribe-emu-cccccccccccc-topo-0.npz"])


def test_a_pruned_copy_is_written_again_from_the_broadcast(tmp_path, tmpdir_here):
    files = TopologyFiles({0: "/driver-only/topo-0.npz"},
                          {0: Shipped(npz_bytes(tmp_path, 3))}, read_marker, "dddddddddddd")
    assert files.load(0) == 3
    (copy,) = tmpdir_here.iterdir()
    # another run on this machine prunes it an hour later, while this run still reads
    removed = prune_local_copies(tmpdir_here, keep_tag="eeeeeeeeeeee",
                                 now=time.time() + STALE_COPY_S + 1)
    assert removed == [copy] and not copy.exists()
    assert files.load(0) == 3
    assert copy.is_file()
