"""The warm-up run (analysis/warmup.py) Spark analyses beside the emulation: it must follow
the documented event schema exactly (a column or type the real logs lack would warm other
code paths, or fail), on the run's own topology file, and refuse a topology too small."""

import pyarrow.parquet as pq
import pytest

from analysis.protocol import SCRIBE_DATA, SCRIBE_JOIN, SCRIBE_MCAST
from analysis.schema import ARROW_TYPES, EVENT_TABLES
from analysis.warmup import write_warmup_run
from topologies import attach_hosts, generate_transit_stub


@pytest.fixture(scope="module")
def topology_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("topo") / "ts600.npz"
    attach_hosts(generate_transit_stub(preset="ts600", seed=1), n_hosts=20, seed=1).save(path)
    return path


def test_warmup_run_follows_the_event_schema(tmp_path, topology_file):
    run = write_warmup_run(tmp_path / "warm", topology_file)
    assert (run / "topology" / "topo-0.npz").resolve() == topology_file.resolve()
    written = sorted(p.name for p in (run / "events").iterdir())
    assert written and set(written) <= set(EVENT_TABLES)
    for table in written:
        (f,) = list((run / "events" / table / "topo=0").glob("*.parquet"))
        schema = pq.read_schema(f)
        assert schema.names == list(EVENT_TABLES[table]), table
        for name, ddl in EVENT_TABLES[table].items():
            assert str(schema.field(name).type) == ARROW_TYPES[ddl], (table, name)
    names = set(pq.read_table(next((run / "events" / "message_type").rglob("*.parquet")))
                .column("name").to_pylist())
    assert {SCRIBE_DATA, SCRIBE_JOIN, SCRIBE_MCAST} <= names
    hosts = pq.read_table(next((run / "events" / "host").rglob("*.parquet")))
    assert hosts.num_rows == 6 and max(hosts.column("router").to_pylist()) < 600


def test_warmup_refuses_a_topology_with_too_few_hosts(tmp_path):
    path = tmp_path / "tiny.npz"
    attach_hosts(generate_transit_stub(preset="ts600", seed=1), n_hosts=3, seed=1).save(path)
    with pytest.raises(ValueError, match="needs 6"):
        write_warmup_run(tmp_path / "warm", path)


@pytest.mark.parametrize("cancelled", [True, False])
def test_a_stopped_warmup_logs_one_line_and_a_failed_one_its_trace(monkeypatch, caplog,
                                                                  tmp_path, cancelled):
    """The emulation ending first stops the warm-up by cancelling its Spark jobs, which
    raise with a long Java trace: that is no news, so run.log gets one line without it.
    A warm-up that fails on its own keeps its trace there."""
    import logging
    import threading

    from scenarios import analysis_spark

    failing = threading.Event()

    def start_then_raise(cfg):
        failing.wait(30)
        raise RuntimeError("Job 1 cancelled as part of cancellation of all jobs")

    monkeypatch.setattr(analysis_spark, "start_analysis_spark", start_then_raise)
    warmup = analysis_spark.SparkWarmup(cfg=None, topology_file=tmp_path / "topo-0.npz")
    with caplog.at_level(logging.INFO, logger="scribe_emu.scenario"):
        warmup.start()
        if cancelled:
            warmup.cancel()
        failing.set()
        warmup._thread.join(30)
    assert not warmup._thread.is_alive()
    (record,) = [r for r in caplog.records if "Spark warm-up" in r.getMessage()]
    assert record.getMessage().startswith(
        "Spark warm-up stopped" if cancelled else "Spark warm-up failed")
    assert bool(record.exc_info) != cancelled     # (the trace: only for a failure)
