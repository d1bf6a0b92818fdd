"""analysis/schema.py copies protocol constants (analysis may not import actors/):
keep the copies equal to the originals."""

from __future__ import annotations

from actors.pastry import types as pastry_types
from actors.scribe import types as scribe_types
from analysis import schema


def test_scribe_type_names_match_actors():
    assert schema.SCRIBE_TYPE_NAMES == scribe_types.TYPE_NAMES


def test_pastry_type_names_match_actors():
    assert schema.PASTRY_TYPE_NAMES == pastry_types.TYPE_NAMES


def test_traffic_codes_match_actors():
    assert (schema.SCRIBE_JOIN, schema.SCRIBE_MCAST, schema.SCRIBE_DATA) == (
        scribe_types.JOIN, scribe_types.MCAST, scribe_types.DATA)


def test_type_name_fallbacks():
    assert schema.type_name(72) == "scribe_bn_sibling"
    assert schema.type_name(83) == "scribe_replica"
    assert schema.type_name(24) == "pastry_row_req"
    assert schema.type_name(30) == "pastry_rows_req"
    assert schema.type_name(40) == "pastry_40"         # an unnamed Pastry code
    assert schema.type_name(95) == "reliable_95"
    assert schema.type_name(3) == "engine_3"
    assert schema.type_name(201) == "type_201"
    assert schema.type_name(201, {201: "test_ping"}) == "test_ping"


def test_create_code_matches_actors():
    from analysis.run import CREATE_TYPE
    assert CREATE_TYPE == scribe_types.CREATE
