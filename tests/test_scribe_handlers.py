"""Scribe's message types declared once (actors/scribe/handlers.py): every type has one
declaration whose methods exist on its part, and the tables built from it follow the
configuration."""

import pytest

from actors.scribe import handlers
from actors.scribe.bottleneck import BottleneckRemover
from actors.scribe.collapse import TreeCollapse
from actors.scribe.membership import TreeJoins, TreeLeaves
from actors.scribe.multicast import Dissemination
from actors.scribe.publishing import ReliablePublishing
from actors.scribe.rendezvous import RendezvousPoints
from actors.scribe.repair import TreeRepair
from actors.scribe.types import DATA, JOIN, JOIN_REQ, MCAST, REPLICA, REPLICA_DATA, SCRIBE_TYPES

PARTS = {"rendezvous": RendezvousPoints, "joins": TreeJoins, "leaves": TreeLeaves,
         "multicast": Dissemination, "publishing": ReliablePublishing, "repair": TreeRepair,
         "collapse": TreeCollapse, "bottleneck": BottleneckRemover}


def test_every_type_declared_once_with_methods_of_its_part():
    declared = [h.type for h in handlers.HANDLERS]
    assert sorted(declared) == sorted(SCRIBE_TYPES)
    for h in handlers.HANDLERS:
        cls = PARTS[h.part]
        for method in (h.receive, h.deliver, h.compiled):
            assert method is None or callable(getattr(cls, method, None)), (h.type, method)
        assert h.receive or h.deliver, h.type
        # a run the compiled loop takes is lent rows
        assert (h.compiled is None and h.loop is None) or h.room is not None, h.type
        assert h.loop in (None, handlers.ROUTED, handlers.REQUEST)
        assert set(h.when) | set(h.loop_when) <= {handlers.PLAIN, handlers.NO_PATHS,
                                                   handlers.NO_PUBLISHING, handlers.REPAIR,
                                                   handlers.JOIN_PATH}


class _Part:
    def __getattr__(self, name):
        return name


@pytest.mark.parametrize("on", [True, False])
def test_tables_follow_the_configuration(on):
    """Every condition met: every declared compiled pass and loop run is on; none met:
    only those that need nothing. A part that is off takes nothing."""
    parts = {name: _Part() for name in PARTS}
    parts["publishing"] = None
    t = handlers.tables(parts, dict.fromkeys((handlers.PLAIN, handlers.NO_PATHS,
                                              handlers.NO_PUBLISHING, handlers.REPAIR,
                                              handlers.JOIN_PATH), on))
    assert REPLICA_DATA not in t.on_receive
    assert t.on_receive[DATA] == "on_data" and t.on_deliver[JOIN] == "on_join_at_rp"
    assert REPLICA in t.compiled   # the rendezvous points' kernels need nothing
    assert (DATA in t.compiled) == on and (MCAST in t.routed_run_types) == on
    assert (JOIN_REQ in t.request_run_types) == on
    assert set(t.compiled) <= set(t.room) and t.routed_run_types <= set(t.room)


def test_on_runs_takes_the_state_apart_in_its_declared_order():
    """``handler_kernels.on_runs`` unpacks ``Scribe.runs_state`` into the names
    ``RUNS_STATE`` gives, in that order (``_`` for the fields it does not use)."""
    import ast
    import inspect
    import textwrap

    from actors.scribe import handler_kernels

    tree = ast.parse(textwrap.dedent(inspect.getsource(handler_kernels.on_runs.py_func)))
    unpacks = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)
               and isinstance(n.value, ast.Name) and n.value.id == "state"]
    assert len(unpacks) == 1
    names = [e.id for e in unpacks[0].targets[0].elts]
    assert len(names) == len(handler_kernels.RUNS_STATE)
    for got, declared in zip(names, handler_kernels.RUNS_STATE, strict=True):
        assert got in ("_", declared), (got, declared)
