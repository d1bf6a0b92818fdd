"""Pastry's own message types declared once (actors/pastry/handlers.py): every type has
one declaration whose methods exist on its part, and the tables built from it follow the
configuration (which types are sent, the room of the hops' acknowledgements)."""

import pytest

from actors.pastry import handlers
from actors.pastry import types as msg_types
from actors.pastry.hop_acks import HopAcks
from actors.pastry.join import JoinProtocol
from actors.pastry.maintenance import LeafSetMaintenance
from actors.pastry.protocol import Pastry
from actors.pastry.table_repair import TableRepair

PARTS = {"join": JoinProtocol, "maintenance": LeafSetMaintenance, "repair": TableRepair,
         "acks": HopAcks, "protocol": Pastry}
SIZES = handlers.Sizes(l=16, rows=8, width=16, nbrs=32, joined_rows=200)


def test_every_own_type_declared_once_with_methods_of_its_part():
    codes = [h.type for h in handlers.HANDLERS]
    assert len(codes) == len(set(codes))
    # (JOIN_DONE: a code nothing sends any more, named in the logs' type table still)
    assert set(codes) == set(msg_types.TYPE_NAMES) - {msg_types.JOIN_DONE}
    for h in handlers.HANDLERS:
        for method in (h.receive, h.routed):
            assert method is None or callable(getattr(PARTS[h.part], method, None)), \
                (h.type, method)
        # a type routed by the overlay is taken whole by its routed method, never as a
        # direct batch (Pastry.handle looks no further than the direct table)
        assert (h.routed is not None) == (h.type in msg_types.ROUTED_TYPES)
        assert (h.receive is None) == (h.type in msg_types.ROUTED_TYPES)


class _Part:
    def __getattr__(self, name):
        return name


@pytest.mark.parametrize("keepalives, acks", [(False, False), (True, False), (True, True)])
def test_tables_follow_the_configuration(keepalives, acks):
    parts = dict.fromkeys(PARTS, _Part())
    t = handlers.tables(parts, {handlers.KEEPALIVES: keepalives, handlers.ACKS: acks,
                                handlers.REPAIRS: keepalives or acks}, SIZES)
    assert (msg_types.KEEPALIVE in t.run_types) == keepalives
    assert (msg_types.HOP_ACK in t.run_types) == acks
    assert (msg_types.ROW_REQ in t.run_types) == (keepalives or acks)
    assert msg_types.JOIN_REQ in t.run_types and msg_types.LEAF_LOOKUP in t.run_types
    assert set(t.room) == {h.type for h in handlers.HANDLERS}
    plain = handlers.tables(parts, dict.fromkeys(
        (handlers.KEEPALIVES, handlers.ACKS, handlers.REPAIRS), False), SIZES)
    for h in handlers.HANDLERS:
        more = t.room[h.type][0] - plain.room[h.type][0]
        # with acknowledgements a hop's timer, and for one arriving over a hop its ack
        assert more == (acks and h.hop) * (1 + (h.routed is not None)), h.type
        assert t.room[h.type][1] == plain.room[h.type][1]
    assert t.receive[msg_types.ACK_TIMER] == "_on_ack_timer"
