"""analysis/ reads the protocols' type codes and constants from the run (its type table and
config.toml), never from a copy; the default selections name types the protocols declare."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from actors.scribe import types as scribe_types
from analysis import load, protocol, schema


def test_default_traffic_names_are_the_protocols():
    """The default selections name types the Scribe protocol declares (by name: the codes
    come from each run's type table)."""
    declared = set(scribe_types.TYPE_NAMES.values())
    for traffic in schema.DEFAULT_TRAFFIC:
        assert traffic.types and set(traffic.types) <= declared
    assert protocol.SCRIBE_CREATE == scribe_types.TYPE_NAMES[scribe_types.CREATE]


def test_analysis_copies_no_type_codes():
    """analysis/ holds no copy of the protocols' code tables (it reads them from the run)."""
    for name in ("TYPE_NAMES", "PASTRY_TYPE_NAMES", "SCRIBE_TYPE_NAMES", "CREATE_TYPE"):
        assert not hasattr(schema, name)
    assert 61 not in [c for t in schema.DEFAULT_TRAFFIC for c in t.types]


def test_run_protocol_reads_the_run(tmp_path):
    """Type table (Parquet, smallest name on a conflict) and pastry.b (config.toml)."""
    out = tmp_path / "events" / "message_type"
    for topo, rows in ((0, {7: "x_data", 9: "x_join"}), (1, {7: "a_data", 11: "x_ping"})):
        (out / f"topo={topo}").mkdir(parents=True)
        pq.write_table(pa.table({"type": pa.array(list(rows), pa.int16()),
                                 "name": pa.array(list(rows.values()), pa.string())}),
                       out / f"topo={topo}" / "types.parquet")
    (tmp_path / "config.toml").write_text("[pastry]\nb = 2\n")
    run = load.run_protocol(tmp_path, tmp_path, None)
    assert run.names == {7: "a_data", 9: "x_join", 11: "x_ping"}
    assert run.pastry_b == 2 and run.routing_base == 4
    assert run.codes(("x_join", "a_data", "nope", 42)) == (9, 7, 42)
    options = schema.resolve_traffic(schema.AnalysisOptions(traffic=(
        schema.Traffic("t", ("p",), ("x_join", "missing")),)), run)
    assert options.traffic[0].types == (9,)
    (tmp_path / "config.toml").write_text("[pastry]\nb = 0\n")
    with pytest.raises(ValueError, match="pastry.b must be a positive integer"):
        protocol.pastry_b(tmp_path)
    (tmp_path / "config.toml").write_text('name = "x"\n')
    assert load.run_protocol(tmp_path, tmp_path, None).routing_base is None


def test_type_name_fallbacks():
    assert schema.type_name(72) == "scribe_72"         # no table names it: its range
    assert schema.type_name(24, {24: "pastry_row_req"}) == "pastry_row_req"
    assert schema.type_name(40) == "pastry_40"         # an unnamed Pastry code
    assert schema.type_name(95) == "reliable_95"
    assert schema.type_name(3) == "engine_3"
    assert schema.type_name(201) == "type_201"
    assert schema.type_name(201, {201: "test_ping"}) == "test_ping"


def test_event_tables_read_on_first_use():
    """load.EventTables reads a table when a section first asks for it, once; unknown
    names are refused (a typo must not become an empty table)."""
    from analysis.load import EventTables
    reads = []
    tables = EventTables(lambda name: reads.append(name) or f"df:{name}")
    assert reads == [] and len(tables) == len(schema.EVENT_TABLES)
    assert tables["message"] == "df:message" and tables["message"] == "df:message"
    assert reads == ["message"]
    with pytest.raises(KeyError):
        tables["messages"]
    assert list(tables) == list(schema.EVENT_TABLES)
