"""Pastry as a protocol stack on the emulator: the composition of its parts.

``Pastry(app, params)`` is one shard's Pastry node set. At ``setup`` it builds:

- :class:`~.nodes.PastryNodes` (leaf set, routing table, neighbourhood set, failed
  memory, joined/incarnation status) -- the state;
- :class:`~.router.Router` (routing step of routed messages, upcalls to the app);
- :class:`~.hop_acks.HopAcks` (HOP_ACK, ACK_TIMER) and :class:`~.table_repair.TableRepair`
  (presumed failures, ROW_REQ, ROW_REPLY);
- :class:`~.maintenance.LeafSetMaintenance` (KA_TIMER, KEEPALIVE, LEAF_REQ, LEAF_REPLY,
  ANNOUNCE, LEAF_REFRESH, LEAF_LOOKUP delivery);
- :class:`~.join.JoinProtocol` (JOIN_START .. JOIN_LEAFS, ROWS_REQ, ROWS_REPLY, rejoin);
- :class:`~.endpoint.OverlayEndpoint`, bound to the application: the common API
  (actors/common_api.py), the only thing the application sees of Pastry.

and dispatches the engine's calls to them. Bootstrap modes (``params["bootstrap"]``):
``oracle`` installs the exact PNS state of :mod:`.oracle` at setup; ``protocol`` runs the
join protocol on the virtual clock. Every parameter is declared once, in
:data:`PARAMETERS` (type, default, valid values, meaning); the scenario schema
(scenarios/config.py) composes its [pastry] section from them, and ``Pastry`` takes
complete dicts (a scenario's, or ``protocol_params`` outside one) and checks them.
"""

from __future__ import annotations

import numpy as np

from actors.common_api import Application
from actors.params import CUSTOM, Param, checked

from . import handler_kernels, handlers
from . import types as msg_types
from .cell_loop import PastryCellLoop, PastryLoopPart
from .endpoint import OverlayEndpoint
from .hop_acks import HopAcks
from .join import JoinProtocol
from .maintenance import LeafSetMaintenance
from .messages import make_batch, msgs_of, payload_of, take_rows
from .nodes import PastryNodes, latency_inputs
from .oracle import oracle_state
from .router import ROUTE_LOG_COLUMNS, Router
from .state import SIZES, PastryState
from .table_repair import TableRepair, count_repairs

# Every parameter of Pastry, declared once: the scenario schema's [pastry] section is made
# of these (scenarios/config.py), and Pastry checks the complete dicts it gets against them.
PARAMETERS = {
    "bootstrap": Param(str, "oracle", "how the tables are built; oracle: the exact PNS "
                       "state, at setup; protocol: the join protocol on the virtual clock",
                       choices=("oracle", "protocol")),
    **SIZES,
    "keepalive_us": Param(int, 0, "leaf-set keep-alive period, us; 0 = off", low=0),
    "fail_timeout_us": Param(int, 0, "silence before a leaf is presumed failed, us; "
                             "0 = 3 keep-alive periods", low=0),
    # A fixed rate, whatever the size: a deployment does not see its nodes arrive faster
    # because there are more of them. At 10/s about 20 joins are in flight on ts5050 (a
    # join lasts ~2 s there), ~0.2 % of a 10k overlay, so concurrent joiners rarely touch
    # the same leaf sets or serve as each other's contact (docs/pastry.md, "Arrival
    # process"). A flash crowd is a high rate, e.g. nodes / 10 for everyone within 10 s.
    "join_rate_per_s": Param(float, 10.0, "protocol bootstrap: node arrivals per second, "
                             "Poisson, the same at any size; a flash crowd is a high rate, "
                             "e.g. nodes / 10", low=0, strict=True),
    # The protocol bootstrap's defaults are the cheapest set known to build the best
    # tables: at 10,000 nodes on ts5050 (10 arrivals/s), five leaf refreshes per node and
    # the nearest-arrival fallback send 2.1 M messages where unbounded refreshes and the
    # node-0 fallback send 14.7 M, for tables as good (85.9 % optimal, leaf sets exact).
    "join_contact_fallback": Param(str, "nearest", "protocol bootstrap: contact of a joiner "
                                   "that finds no settled node; first: node 0; nearest: "
                                   "the nearest earlier arrival",
                                   choices=("first", "nearest")),
    "join_settle_us": Param(int, 2_000_000, "protocol bootstrap: a node serves as a join "
                            "contact this long after joining, us", low=0),
    "leaf_refresh_us": Param(int, 2_000_000, "protocol bootstrap: joined nodes look up "
                             "their own id this often until the last arrival + "
                             "join_settle_us, us; 0 = never", low=0),
    "leaf_refresh_rounds": Param(int, 5, "protocol bootstrap: at most this many leaf "
                                 "refreshes per node after its join; 0 = no bound", low=0),
    # Which join: "2001" is Rowstron & Druschel's join alone (rows from the JOIN's route,
    # leaf set from Z, neighbourhood set from A, announcements, leaf refresh); "2002" adds
    # Castro et al.'s second stage (a joined node asks the nodes of every row for theirs)
    # and FreePastry's route-set maintenance every 15 minutes. Over ten ts5050 topologies
    # at 100,000 nodes the 2001 join reproduces the JSAC 2002 delay penalties and link
    # stress within 6 %, the 2002 set builds better tables (88 % optimal against 79 %) and
    # lands 11 % below them (docs/pastry.md, "Ten topologies"): the published overlay is
    # the 2001 join's, so that is the default. It also governs a recovering node's rejoin.
    "join": Param(str, "2001", "which join protocol; 2001: Rowstron & Druschel's join "
                  "alone; 2002: plus Castro et al.'s second stage (every row) and route-set "
                  "maintenance every 15 min; custom: as join_exchange_rows and "
                  "table_maintenance_us say", choices=("2001", "2002", CUSTOM),
                  presets={"2001": {"join_exchange_rows": 0, "table_maintenance_us": 0},
                           "2002": {"join_exchange_rows": 8,
                                    "table_maintenance_us": 900_000_000}}),
    "table_maintenance_us": Param(int, 0, "routing-table maintenance period; a node asks "
                                  "one random entry of each row for its row, us; 0 = off "
                                  "(set by join)", low=0),
    "join_exchange_rows": Param(int, 0, "a joined node asks the nodes of its top this many "
                                "rows for theirs, the second join stage; 0 = off (set by "
                                "join)", low=0),
    "dead_memory": Param(int, 8, "presumed-failed ids a node remembers", low=1),
    "join_start_us": Param(int, 0, "protocol bootstrap: time of the first arrival, us",
                           low=0),
    "rejoin_timeout_us": Param(int, 1_000_000, "a recovering node tries its next contact "
                               "after this, us", low=1),
    "hop_ack": Param(str, "auto", "per-hop acks of routed messages; auto: on iff "
                     "keep-alives are", choices=("auto", "on", "off")),
    "ack_slack_us": Param(int, 0, "hop-ack deadline = sent + 2 x latency + this, us; "
                          "0 = one cell", low=0),
}
# not a setting: the run's topology seed, which the join schedule follows
SEED = Param(int, 0, "seed of the join schedule", low=0)


def check_pastry_params(params: dict) -> dict:
    """A copy of ``params`` if it names every parameter of :data:`PARAMETERS` and
    ``seed``, no other, each valid; else a one-line ValueError."""
    return checked("Pastry", {**PARAMETERS, "seed": SEED}, dict(params))


class NoApplication:
    """The application of a Pastry run alone: accepts every upcall, does nothing."""

    def bind(self, endpoint):
        pass

    def setup(self, ctx):
        pass

    def receive(self, ctx, batch):
        pass

    def deliver(self, ctx, batch):
        pass

    def forward(self, ctx, batch, next_hop):
        return batch, next_hop

    def new_leafs(self, ctx, local_idx):
        pass

    def on_fail(self, ctx, local_idx):
        pass

    def on_recover(self, ctx, local_idx):
        pass

    def checkpoint(self) -> dict:
        return {}

    def restore(self, state: dict):
        pass

    def dump(self, ctx, phase):
        return None


class Pastry:
    TYPE_NAMES = msg_types.TYPE_NAMES

    def __init__(self, app: Application | None, params: dict):
        """``app``: the application, or None for Pastry alone; Pastry calls only the
        ``Application`` methods of actors/common_api.py on it. ``params``: every Pastry
        parameter (see :func:`check_pastry_params`)."""
        self.params = check_pastry_params(params)
        self.app: Application = NoApplication() if app is None else app
        # the application's optional compiled pass for a cell of its direct messages
        self._app_compiled = getattr(self.app, "receive_compiled", None)
        self.nodes: PastryNodes | None = None
        # message types whose runs handle_runs may take (set up by _compose)
        self.compiled_run_types: frozenset = frozenset()
        self._app_run_types: frozenset = frozenset()
        # the compiled cell loop the engine may run (PastryCellLoop; set up by _compose)
        self.run_cells = None
        self.loop_part = None

    # ---- engine interface ---------------------------------------------------------------
    def setup(self, ctx):
        p = self.params
        ids_hi = np.asarray(ctx.shared("node_ids_hi"), np.uint64)
        ids_lo = np.asarray(ctx.shared("node_ids_lo"), np.uint64)
        if len(ids_hi) != ctx.n_nodes:
            raise ValueError("Pastry.setup: shared node_ids_hi must have one id per node")
        global_ids = np.asarray(ctx.nodes, np.int64)
        oracle = p["bootstrap"] == "oracle"
        self.nodes = PastryNodes(self.app, global_ids, ids_hi, ids_lo,
                                 self._initial_tables(ctx, global_ids, ids_hi, ids_lo),
                                 p["dead_memory"], joined=oracle)
        self._compose(ctx)
        if oracle:
            self.maintenance.start_keepalive_all(ctx)
        else:
            self.join.schedule_arrivals(ctx)
        self.endpoint = OverlayEndpoint(self.router, self.nodes)
        self.app.bind(self.endpoint)
        self.app.setup(ctx)
        # the application's direct types whose runs it takes several at a time (its
        # optional receive_runs): handle_runs passes them on
        self._app_run_types = frozenset(getattr(self.app, "compiled_run_types", ())) \
            if hasattr(self.app, "receive_runs") else frozenset()
        self.compiled_run_types = self.compiled_run_types | self._app_run_types

    def _initial_tables(self, ctx, global_ids, ids_hi, ids_lo) -> PastryState:
        p = self.params
        if p["bootstrap"] == "oracle":
            hr, rdist, lan = latency_inputs(ctx)
            return oracle_state(global_ids, ids_hi, ids_lo, hr, rdist, lan, b=p["b"],
                                l=p["l"], m=p["m"], n_nodes=ctx.n_nodes)
        return PastryState.empty(len(global_ids), ctx.n_nodes, p["b"], p["l"], p["m"])

    def _compose(self, ctx) -> None:
        """The protocol parts over ``self.nodes`` and the handler of each message type."""
        p = self.params
        acks_on = p["keepalive_us"] > 0 if p["hop_ack"] == "auto" else p["hop_ack"] == "on"
        self.repair = TableRepair(self.nodes)
        self.acks = HopAcks(self.nodes, self.repair, acks_on,
                            p["ack_slack_us"] or getattr(ctx, "delta_us", 0) or 1000)
        self.router = Router(self.nodes, self.acks, self.app, self._deliver_own,
                             self._forward_own)
        self.maintenance = LeafSetMaintenance(self.nodes, self.router, self.repair,
                                              p["keepalive_us"], p["fail_timeout_us"],
                                              p["leaf_refresh_us"],
                                              p["leaf_refresh_rounds"],
                                              p["table_maintenance_us"])
        self.join = JoinProtocol(self.nodes, self.router, self.maintenance,
                                 join_rate_per_s=p["join_rate_per_s"],
                                 join_start_us=p["join_start_us"],
                                 join_settle_us=p["join_settle_us"],
                                 join_contact_fallback=p["join_contact_fallback"],
                                 join_exchange_rows=p["join_exchange_rows"],
                                 rejoin_timeout_us=p["rejoin_timeout_us"], seed=p["seed"])
        # each type's handler, whether this configuration sends it (keep-alives; hop acks;
        # the row requests of a repair, which a presumed failure starts) and the room of
        # its runs, from its declaration (handlers.py)
        keepalives = p["keepalive_us"] > 0
        nodes = self.nodes
        self._joined_room = self.join.joined_room()
        t = handlers.tables(
            {"join": self.join, "maintenance": self.maintenance, "repair": self.repair,
             "acks": self.acks, "protocol": self},
            {handlers.KEEPALIVES: keepalives, handlers.ACKS: self.acks.enabled,
             handlers.REPAIRS: keepalives or self.acks.enabled},
            handlers.Sizes(nodes.leaves.members.shape[1], nodes.table.rows,
                           nodes.table.width, nodes.nbrs.members.shape[1], self._joined_room))
        # direct batches of Pastry's types to their handler, and the routed ones a handler
        # may take whole (it returns False to leave them to the router)
        self._handlers, self._routed_handlers = t.receive, t.routed
        # (handle() gives these types' batches to their handler without a look at the mode)
        assert not set(self._handlers) & msg_types.ROUTED_TYPES
        # the types whose runs handle_runs takes in one compiled call, and each one's room
        self.compiled_run_types = t.run_types
        self._run_room = t.room
        # the rows per message of each type, for the kernel to zero its runs' rows itself
        self._run_rows = np.zeros(max(self._run_room) + 1, np.int64)
        for ty, (per_row, _) in self._run_room.items():
            self._run_rows[ty] = per_row
        self._run_counts = np.zeros(handler_kernels.N_RUN_COUNTS, np.int64)
        # Pastry's part of a compiled cell loop, and the loop of Pastry alone
        own = self.compiled_run_types
        self.loop_part = PastryLoopPart(self, own, self._run_room) if own else None
        self.run_cells = PastryCellLoop(self.loop_part) if own else None

    def _handler(self, type_code):
        handler = self._handlers.get(int(type_code))
        if handler is None:
            raise ValueError(f"Pastry: no handler for type {type_code}")
        return handler

    def handle_runs(self, ctx, m, payload, local, bounds, run_types, first, last) -> int:
        """Runs ``first..last-1`` of a cell pass, all of :attr:`compiled_run_types` and
        bound for live nodes (``m`` the pass's records in dispatch order, ``payload`` its
        int32 payload, ``local`` each row's local index, run r = rows ``bounds[r]`` to
        ``bounds[r + 1]`` of type ``run_types[r]``): Pastry's own in one compiled call
        (:meth:`_own_runs`), then the application's (its types come after Pastry's in a
        pass) in one call of its ``receive_runs``, which :meth:`handle` would give to its
        ``receive_compiled`` one by one. Returns the first run not handled (``first``:
        none); the engine hands that one to :meth:`handle`."""
        app_types = self._app_run_types
        split = first
        while split < last and run_types[split] not in app_types:
            split += 1
        if split > first:
            done = self._own_runs(ctx, m, payload, local, bounds, run_types, first, split)
            if done < split:
                return done
        if split < last:
            return self.app.receive_runs(ctx, m, payload, local, bounds, split, last)
        return split

    def _own_runs(self, ctx, m, payload, local, bounds, run_types, first, last) -> int:
        """Pastry's runs ``first..last-1`` of :meth:`handle_runs` in one compiled call
        (``handler_kernels.on_runs``): what :meth:`handle` does run by run, with the same
        sends in the same order. The application hears of changed leaf sets
        (``new_leafs``) after the call, once for the nodes of all its runs: the upcall
        carries no time and sends nothing, so no handler of these runs can tell. Returns
        the first run not handled (``first`` when none was: nothing done); if that is
        before ``last``, the kernel declined it (a rejoin's JOIN_START, a LEAF_REFRESH run
        with a table tick, ...: ``handler_kernels.on_runs``) and the engine hands it to
        :meth:`handle`."""
        room = self._run_room
        rows = ints = 0
        for r in range(first, last):
            per_row, per_id = room[run_types[r]]
            n = bounds[r + 1] - bounds[r]
            rows += per_row * n
            ints += per_id * n
        done, probes, changed, log, joined = ctx.send_compiled(
            rows, ints, handler_kernels.on_runs, m, payload, local, bounds, first, last,
            not self.acks.enabled, self.nodes.learn_inputs(ctx), self.join.run_inputs(),
            self.acks.loop_inputs(), *ctx.rng_state(), self._run_rows, self._joined_room,
            self._run_counts, zeroed=False)
        if len(log):
            ctx.log_records("route", log, ROUTE_LOG_COLUMNS)
        if probes:
            ctx.count("pastry_probes", probes)
        if joined:
            ctx.count("pastry_joined", joined)
        count_repairs(ctx, self._run_counts)
        if len(changed):
            self.app.new_leafs(ctx, changed)
        return done

    def handle(self, ctx, type_code, batch):
        """One sub-batch of one message type: Pastry's own direct messages to their
        handler, routed messages (mode 1) to the router, the application's direct
        messages to ``app.receive``."""
        direct = self._handlers.get(type_code)
        if direct is not None:   # an own type sent direct only (types.ROUTED_TYPES)
            direct(ctx, batch)
            return
        fast = self._routed_handlers.get(type_code)
        if fast is not None and fast(ctx, batch):
            return
        own = msg_types.is_pastry_type(type_code)
        if not own and self._app_compiled is not None \
                and self._app_compiled(ctx, type_code, batch):
            return
        m = msgs_of(batch)
        routed = m["mode"] == 1
        n_routed = np.count_nonzero(routed)
        if not n_routed:    # (the batch as it came: the application copies what it keeps)
            if own:
                self._handler(type_code)(ctx, batch)
            else:
                self.app.receive(ctx, batch)
            return
        if n_routed == len(m):
            self.router.receive(ctx, take_rows(m, slice(None)), payload_of(batch))
            return
        if n_routed:
            self.router.receive(ctx, take_rows(m, routed), payload_of(batch))
        if n_routed < len(m):
            direct = make_batch(take_rows(m, ~routed), payload_of(batch))
            if own:
                self._handler(type_code)(ctx, direct)
            else:
                self.app.receive(ctx, direct)

    def _on_ack_timer(self, ctx, batch):
        again = self.acks.on_timer(ctx, batch)
        if again is not None:
            # no forward upcall again: the application saw the message at this node
            self.router.step(ctx, again, None, upcall=False)

    def _deliver_own(self, ctx, m, rows):
        self.maintenance.deliver_lookup(ctx, m)
        self.join.deliver(ctx, m, rows)

    def _forward_own(self, ctx, m):
        self.join.forward(ctx, m)

    def on_fail(self, ctx, local_idx):
        """A crashed node stops; its timers and incoming messages are dropped by the engine,
        and the hops it was waiting to see acknowledged are forgotten with it."""
        li = np.asarray(local_idx, np.int64)
        self.acks.forget_senders(li)
        self.app.on_fail(ctx, li)

    def on_recover(self, ctx, local_idx, now=0):
        """A recovered node keeps its id but not its tables: it rejoins through the join
        protocol, with the nodes it knew (nearest first) as candidate contacts, so that its
        neighbours put it back into their leaf sets (see :meth:`JoinProtocol.rejoin`).
        The engine must give the recovery time as ``ctx.now``."""
        li = np.asarray(local_idx, np.int64)
        now = int(getattr(ctx, "now", now) or now)
        if len(li):
            self.join.rejoin(ctx, li, now)
        self.app.on_recover(ctx, li)

    def checkpoint(self) -> dict:
        return {"nodes": self.nodes.checkpoint(), "join": self.join.checkpoint(),
                "maintenance": self.maintenance.checkpoint(), "acks": self.acks.checkpoint(),
                "app": self.app.checkpoint()}

    def restore(self, d: dict):
        """Back to a checkpoint of a stack set up on the same shard (parts keep their
        identity; their arrays are replaced)."""
        self.nodes.restore(d["nodes"])
        self.join.restore(d["join"])
        self.maintenance.restore(d["maintenance"])
        self.acks.restore(d["acks"])
        self.app.restore(d["app"])

    def dump(self, ctx, phase):
        return self.app.dump(ctx, phase)

    # ---- queries ------------------------------------------------------------------------
    @property
    def joined(self) -> np.ndarray:
        """bool[n]: which local nodes have joined."""
        return self.nodes.joined

    def export_state(self, ctx=None):
        """(global node ids, state dict) of this shard, for :func:`quality.stack_states`
        (``emu.call("export_state")`` passes the shard's ctx, which is not needed)."""
        return self.nodes.global_ids.copy(), self.nodes.tables().to_dict()
