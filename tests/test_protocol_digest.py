"""The protocol fast path changes nothing: a small Pastry run on the real ShardEngine
(protocol bootstrap with crashes, recoveries, keep-alives, repair; see
benchmarks/protocol_digest.py) gives, for one and two shards, the digest of its message
log, route log, final tables and counters that the numpy code before the numba kernels
gave (recorded 2026-11-24 from commit 4f73e8c). A change of any message, decision or log
row fails this test; a deliberate protocol change must record the new digest here and
say why in its commit."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from protocol_digest import digest, run_workload  # noqa: E402

REFERENCE = {  # nodes -> digest from the numpy code (identical for 1 and 2 shards)
    200: "f4783aca02d36b3e8606e80de71f83f005bfc2a80c97cdc4c153ee1922fd397c",
    300: "f3836036a54d26dc75c89c8460f9a8f5e2c48ef5a57a5947642b4b6d14f4dbe6",
    600: "d13e3d0e63c771d632f14666b20b34ecc6ef703233ad1d17cbfc5ff59bef6460",
}


@pytest.mark.parametrize("shards", [1, 2])
def test_small_protocol_run_reproduces_the_reference_digest(shards):
    emu, _ = run_workload(200, shards)
    d, rows = digest(emu)
    assert rows["message"] > 50_000 and rows["counters"]["counts.pastry_rejoins"] > 0
    assert d == REFERENCE[200]
