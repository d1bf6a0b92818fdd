"""Scribe (Castro et al., JSAC 2002) as an application on the overlay's common API.

``Scribe(params)`` implements ``actors.common_api.Application``: the overlay calls
``forward``/``deliver``/``receive``/``new_leafs`` on it and passes on the stack calls
``setup``/``on_fail``/``on_recover``/``checkpoint``/``restore``/``dump``. Scribe reaches
the network only through the endpoint it is bound to (``route``, ``send``,
``replica_set``).

This class only wires the parts (built in ``setup``, each given what it uses) and sends
each message type to the part that handles it:
- ``GroupDirectory`` (groups.py): group keys, credential checks, group/refusal logs;
- ``RendezvousPoints`` (rendezvous.py): CREATE, the group records at the RPs, their
  copies on the k closest nodes and the take-over by a copy;
- ``TreeState`` (tree.py): children tables, parents, RP records of this shard's nodes;
- ``RootPathGuard`` (rootpath.py): parent links, root paths, loop breaking;
- ``TreeJoins``/``TreeLeaves`` (membership.py): the CREATE/JOIN/LEAVE protocol;
- ``Dissemination`` (multicast.py): MCAST to the RP, DATA down the tree;
- ``TreeRepair`` (repair.py): heartbeats, refresh, child expiry, parent suspicion and
  re-join;
- ``BottleneckRemover`` (bottleneck.py) and ``TreeCollapse`` (collapse.py): the
  tree-shaping policies;
- ``OrderedDelivery`` (reliable.py) and ``ReliablePublishing`` (publishing.py): the
  reliable ordered delivery layer.
"""

from __future__ import annotations

import numpy as np

from actors.params import Param, checked

from . import collapse_kernels, handler_kernels, handlers
from .bottleneck import BottleneckRemover
from .collapse import TreeCollapse
from .groups import GroupDirectory
from .membership import TreeJoins, TreeLeaves
from .multicast import Dissemination
from .publishing import ReliablePublishing
from .reliable import OrderedDelivery
from .rendezvous import RendezvousPoints
from .repair import TreeRepair
from .rootpath import RootPathGuard, RootPaths
from .tree import TreeState
from .types import (
    ADOPT,
    COLLAPSE_WAVE,
    CREATE,
    DATA,
    HEARTBEAT,
    JOIN,
    JOIN_ACK,
    LEAVE,
    MCAST,
    REFRESH,
    REJOIN,
    REPLICA,
    RP_ADDR,
    TICK,
    TYPE_NAMES,
)
from .wire import NO_PAYLOAD, Messenger, Room, ScribeError, msgs_of, take_rows

# the slot columns the compiled passes take by their own names (``runs_state``)
_SLOT_COLUMNS = ("active", "root", "parent", "member", "last_heard", "last_seq", "last_sent",
                 "n_children", "group", "join_cred", "acl", "rp_cache", "rp_cache_time",
                 "my_cred", "creator", "rep_acl", "rep_creator")

# the most rows per message lent to a run of receive_runs (they are not zeroed: a loose
# bound costs nothing)
_RUN_ROOM_MAX = 1024.0

# Wiring, not configuration: set by the scenario runner per variant, never by a user.
WIRING = {
    "variant": None,          # label for delivery / tree_edge rows; None: derived
    "groups_key": "groups",   # name of the shared group table (ctx.shared)
}

# Every parameter of Scribe, declared once: the scenario schema's [scribe] section is made
# of these (scenarios/config.py). Scribe works with None where a setting says "off" or
# "auto" (``means``) and takes either form.
PARAMETERS = {
    "bottleneck": Param(bool, False, "run the bottleneck remover while joining"),
    "bottleneck_bound": Param(int, 64, "bound of the bottleneck remover on the children of "
                              "a node, all groups together", low=1),
    "heartbeat_us": Param(int, 0, "tree maintenance period, us; 0 = no repair", low=0,
                          means={0: None}),
    "heartbeat_miss": Param(int, 3, "silent parent periods before a repair join", low=1),
    "child_expiry_miss": Param(int, 3, "periods without refresh before a child entry "
                               "expires", low=1),
    "replicas": Param(int, 5, "RP record copies on the closest nodes; 0 = none", low=0),
    "rp_cache_ttl_us": Param(int, 0, "sources re-route to the RP after this, us; 0 = "
                             "heartbeat_miss periods", low=0, means={0: None}),
    "reliable": Param(bool, False, "ordered reliable delivery layer: root numbering, "
                      "buffers"),
    "reliable_buffer": Param(int, 256, "messages buffered per (node, group)", low=1),
    "max_tree_hops": Param(int, 255, "DATA copies beyond this many hops are dropped: the loop "
                           "guard", low=1),
    "lazy_growth": Param(bool, False, "lazy-growth variant: a JOIN stops at the first tree "
                         "node, which adopts the joiner itself unless it has "
                         "bottleneck_bound children"),
    "root_paths": Param(str, "auto", "pass root paths down the trees to detect loops; auto: "
                        "on with the bottleneck remover",
                        choices=("auto", "on", "off"),
                        means={"auto": None, "on": True, "off": False}),
    "root_path_max": Param(int, 32, "longest root path kept; deeper counts as a loop", low=2),
}


def checked_params(params: dict | None) -> dict:
    """Every parameter of :data:`PARAMETERS` given (plus optional :data:`WIRING`), each
    valid, as Scribe's values (None for "off" / "auto"); else a one-line ValueError."""
    params = dict(params or {})
    wiring = {k: params.pop(k) for k in WIRING if k in params}
    params = {**WIRING, **wiring, **checked("Scribe", PARAMETERS, params)}
    hb = params["heartbeat_us"]
    if params["rp_cache_ttl_us"] is None and hb:
        params["rp_cache_ttl_us"] = params["heartbeat_miss"] * hb
    return params


class Scribe:
    TYPE_NAMES = TYPE_NAMES

    def __init__(self, params: dict | None = None):
        self.params = checked_params(params)
        self.endpoint = None
        self.groups: GroupDirectory | None = None
        self.tree: TreeState | None = None

    # ---- wiring -----------------------------------------------------------------
    def bind(self, endpoint):
        """Attach the overlay endpoint that offers ``route``, ``send``, ``replica_set``."""
        self.endpoint = endpoint
        return self

    def setup(self, ctx):
        if self.endpoint is None:
            raise ScribeError("Scribe.setup: no overlay bound (call scribe.bind(pastry))")
        table = ctx.shared(self.params["groups_key"])
        if table is None or "id_hi" not in table:
            raise ScribeError("Scribe.setup: shared group table missing (see groups.group_table)")
        self.groups = GroupDirectory(table)
        self._build(TreeState(len(ctx.nodes), ctx.n_nodes, len(self.groups)))

    def _build(self, tree: TreeState, saved: dict | None = None) -> None:
        """Make the parts around ``tree`` (from a checkpoint's ``saved`` state if given)
        and the message-type dispatch tables."""
        p, saved = self.params, saved or {}
        self.tree = tree
        self.messenger = Messenger(self.endpoint, self.groups)
        use_paths = p["bottleneck"] if p["root_paths"] is None else p["root_paths"]
        paths = None
        if use_paths:
            paths = (RootPaths.from_state(saved["paths"]) if saved.get("paths") is not None
                     else RootPaths(p["root_path_max"]))
        self.guard = RootPathGuard(tree, self.messenger, paths)
        self.rendezvous = RendezvousPoints(tree, self.groups, self.messenger, self.guard,
                                           p["replicas"], saved.get("replicas_stale"))
        self.collapse = TreeCollapse(tree, self.messenger, bool(saved.get("collapsed", False)))
        self.ordered = self.publishing = None
        if p["reliable"]:
            self.ordered = OrderedDelivery(tree, self.messenger, p["reliable_buffer"],
                                           self.variant_label)
            self.publishing = ReliablePublishing(tree, self.messenger, self.ordered,
                                                 self.rendezvous, p["reliable_buffer"],
                                                 p["heartbeat_us"], p["heartbeat_miss"])
            if saved.get("reliable") is not None:
                self.publishing.restore(saved["reliable"])
        self.bottleneck = None
        if p["bottleneck"]:
            self.bottleneck = BottleneckRemover(tree, self.messenger, self.guard,
                                                p["bottleneck_bound"])
        self.leaves = TreeLeaves(tree, self.messenger)
        self.joins = TreeJoins(tree, self.groups, self.messenger, self.guard, self.rendezvous,
                               self.ordered, self.bottleneck, p["lazy_growth"],
                               p["bottleneck_bound"])
        if self.publishing is not None:  # reliable: go on with the replicated stream
            self.joins.on_take_over = self.publishing.take_over_stream
        self.multicast = Dissemination(tree, self.groups, self.messenger, self.ordered,
                                       self.publishing, p["rp_cache_ttl_us"],
                                       p["max_tree_hops"], self.variant_label)
        if self.publishing is not None:  # re-sends go as fresh publishes do
            self.publishing.send_mcast = self.multicast.send_mcast
        self.repair = TreeRepair(tree, self.messenger, self.guard, self.rendezvous, self.leaves,
                                 self.ordered, self.publishing, p, saved.get("ticking"))
        self._make_dispatch_tables()

    def _make_dispatch_tables(self) -> None:
        """The message types' handlers, compiled passes and loop runs, from their
        declaration (handlers.py) and this configuration."""
        plain, no_paths = self.ordered is None, self.guard.paths is None
        # the JOIN path's compiled passes: also without a tree shaper and lazy growth
        self.joins_compiled = plain and no_paths and self.bottleneck is None \
            and not self.params["lazy_growth"]
        # a routing step's deliver and forward upcalls in one pass (with tree repair, each
        # upcall's first TICK timers after its sends, in the same pass)
        self.routed_compiled = self.joins_compiled
        self.joins.timer_inputs = self.repair.timer_inputs
        t = handlers.tables(
            {"rendezvous": self.rendezvous, "joins": self.joins, "leaves": self.leaves,
             "multicast": self.multicast, "publishing": self.publishing,
             "repair": self.repair, "collapse": self.collapse, "bottleneck": self.bottleneck},
            {handlers.PLAIN: plain, handlers.NO_PATHS: no_paths,
             handlers.NO_PUBLISHING: self.publishing is None,
             handlers.REPAIR: bool(self.repair.period),
             handlers.JOIN_PATH: self.joins_compiled})
        self.on_receive, self.on_deliver, self.compiled = t.on_receive, t.on_deliver, t.compiled
        # the compiled passes' types, several runs of a pass in one call (receive_runs)
        self.compiled_run_types = frozenset(self.compiled)
        # routed types a compiled loop may take through a node (its routing step, then
        # the deliver and forward upcalls compiled), and requests whose handler routes (a
        # JOIN_REQ's JOIN) it may take with the routing step at their node
        self.routed_run_types = t.routed_run_types
        self.request_run_types = t.request_run_types
        # rows lent per message of each type, raised when a run asks for more (a tick's
        # sends depend on the trees its node is in)
        self._run_room = Room(_RUN_ROOM_MAX, t.room)

    def variant_label(self) -> str:
        """Label of the delivery and tree_edge rows: the configured one, else what the
        trees are (collapsed, bottleneck-bounded, or plain Scribe)."""
        if self.params["variant"]:
            return self.params["variant"]
        if self.collapse.collapsed:
            return "collapsed"
        return "bottleneck" if self.params["bottleneck"] else "scribe"

    # ---- overlay upcalls ----------------------------------------------------------
    def receive(self, ctx, batch):
        """Direct messages (and self-messages: requests, timers)."""
        payload = getattr(batch, "payload", None)
        self.messenger.payload = NO_PAYLOAD if payload is None else payload
        self._dispatch(ctx, msgs_of(batch), self.on_receive)

    def receive_compiled(self, ctx, type_code, batch) -> bool:
        """Direct messages of one type in one compiled pass where Scribe has one (TICK,
        HEARTBEAT, REFRESH, DATA, JOIN_ACK in their common case); False (nothing done)
        otherwise."""
        handler = self.compiled.get(type_code)
        if handler is None:
            return False
        m = msgs_of(batch)
        if not handler(ctx, m):
            return False
        if type_code != TICK:   # (a tick leaves every node with tree state ticking)
            self.repair.start_ticks(ctx, m)
        return True

    def receive_runs(self, ctx, m, payload, local, bounds, first, last) -> int:
        """Runs ``first..last-1`` of a cell pass (types of :attr:`compiled_run_types`, to
        live nodes) in one compiled call (``handler_kernels.on_runs``): what
        :meth:`receive_compiled` does run by run, the same sends in the same order (each
        run's first TICK timers, ``start_ticks``, after its sends), the same counts and
        delivery rows. Returns the first run not taken: one the kernel declined or lacked
        room for (the overlay gives it to ``receive_compiled``, which asks again with the
        room needed); the room lent per message of its type grows to that."""
        room = self._run_room
        rows = 0
        for q in range(first, last):
            rows += room.rows(int(m["type"][bounds[q]]), bounds[q + 1] - bounds[q])
        t = self.tree
        sizes = np.array([t.slot_index.size, t.entry_index.size], np.int64)
        counts = np.zeros(collapse_kernels.N_COUNTS, np.int64)
        done, status, need, no_state, looping, delivered = self.messenger.run_compiled(
            ctx, rows, handler_kernels.on_runs, m, local, bounds, first, last,
            self.runs_state(ctx), sizes, counts)
        t.inserted(sizes[0], sizes[1])
        self.collapse.counted(ctx, counts)
        if status == handler_kernels.MORE_ROOM:
            room.asked(int(m["type"][bounds[done]]), need, bounds[done + 1] - bounds[done])
        if no_state >= 0:   # (a DATA run was taken)
            self.multicast.data_counts(ctx, no_state, looping)
        if len(delivered):
            self.multicast.log_deliveries(ctx, delivered)
        return done

    def runs_state(self, ctx) -> tuple:
        """``handler_kernels.on_runs``'s arguments between ``last`` and ``out`` (and
        ``on_mcast_routed``'s, ``on_join_routed``'s, ...): the trees, keys, timers and type
        codes its kernels work on, in the order ``handler_kernels.RUNS_STATE`` names them
        (read at each call: the tree's arrays are replaced when it grows, and by a
        restore)."""
        t, keys, rp = self.tree, self.groups.table, self.repair
        sl, en = t.slots, t.entries
        period = rp.period or 0   # (no TICK runs without heartbeats)
        fields = {
            "ticking": rp.ticking, "node_ids": np.asarray(ctx.nodes),
            "six": t.slot_index.arrays, "eix": t.entry_index.arrays, "n_groups": t.n_groups,
            "n_nodes": t.n_nodes, "max_hops": self.multicast.max_tree_hops,
            "node_children": t.node_children, "slot_node": sl["node"],
            "valid": en["valid"], "child": en["child"], "refresh": en["refresh"],
            "e_slot": en["slot"], "e_cred": en["cred"],
            "key_hi": keys["id_hi"], "key_lo": keys["id_lo"], "stale": self.rendezvous.stale,
            "period": period, "silent_after": rp.heartbeat_miss * period,
            "stale_after": rp.child_expiry_miss * period, "reset_cols": t.reset_columns(),
            "replicas": self.rendezvous.k,
            "data_type": DATA, "tick_type": TICK, "heartbeat_type": HEARTBEAT,
            "refresh_type": REFRESH, "leave_type": LEAVE, "rejoin_type": REJOIN,
            "join_ack_type": JOIN_ACK, "mcast_type": MCAST, "rp_addr_type": RP_ADDR,
            "join_type": JOIN, "collapse_wave_type": COLLAPSE_WAVE, "adopt_type": ADOPT,
            "create_type": CREATE, "replica_type": REPLICA}
        for column in _SLOT_COLUMNS:
            fields[column] = sl[column]
        return tuple(fields[f] for f in handler_kernels.RUNS_STATE)

    def routed(self, ctx, m, here, next_hop) -> bool:
        """A routing step's messages at once (rows ``here`` delivered at this node, the
        others passing it towards ``next_hop``): :meth:`deliver` then :meth:`forward` in one
        compiled pass where Scribe has it (JOINs, no tree repair); False (nothing done)
        otherwise."""
        return self.routed_compiled and self.joins.routed_compiled(ctx, m, here, next_hop)

    def deliver(self, ctx, batch):
        """Routed messages at the live node closest to their key (the RP)."""
        m = msgs_of(batch)
        if self.joins_compiled and len(m) and m["type"][0] == JOIN \
                and self.joins.at_rp_compiled(ctx, m):
            return
        self._dispatch(ctx, m, self.on_deliver)

    def forward(self, ctx, batch, next_hop):
        """Routed messages passing a node: JOINs build the tree here (SPEC 3)."""
        m = msgs_of(batch)
        next_hop = np.asarray(next_hop).copy()
        is_join = (m["type"] == JOIN) & (m["src"] != m["dst"])  # not the origin's own call
        if is_join.any() and not (self.joins_compiled
                                  and self.joins.forward_compiled(ctx, m, next_hop)):
            self.joins.forward(ctx, m, np.flatnonzero(is_join), next_hop)
            if not self.params["lazy_growth"]:  # a lazy JOIN makes no new forwarders
                self.repair.start_ticks(ctx, m[is_join])
        return batch, next_hop

    def _dispatch(self, ctx, m, table):
        if not len(m):
            return
        ty = m["type"]
        # the engine hands over one message type at a time: then no grouping is needed
        kinds = [ty[0]] if np.count_nonzero(ty != ty[0]) == 0 else np.unique(ty)
        for t in kinds:  # ascending type code, order within a type preserved
            handler = table.get(int(t))
            # the handler's own rows
            sub = take_rows(m, slice(None)) if len(kinds) == 1 else m[ty == t]
            if handler is None:
                ctx.count("scribe_unhandled", len(sub))
                continue
            handler(ctx, sub)
        self.repair.start_ticks(ctx, m)

    def new_leafs(self, ctx, local_idx):
        self.rendezvous.mark_stale(local_idx)

    # ---- stack calls --------------------------------------------------------------
    def on_fail(self, ctx, local_idx):
        """A crashed node loses its Scribe state."""
        li = np.atleast_1d(np.asarray(local_idx, np.int64))
        self.tree.drop_nodes(li)
        self.repair.forget_nodes(li)

    def on_recover(self, ctx, local_idx):
        return None

    def dump(self, ctx, phase):
        """Log every tree edge (parent, child) of the shard's active children tables."""
        t = self.tree
        act = t.active_slots()
        qi, e = t.children_of(act)
        ctx.log_owned("tree_edge", group=t.slots["group"][act][qi].astype(np.int32),
                      parent=np.asarray(ctx.nodes)[t.slots["node"][act][qi]].astype(np.int32),
                      child=t.entries["child"][e].astype(np.int32),
                      variant=self.variant_label())

    def checkpoint(self) -> dict:
        return {"tree": self.tree.state(), "collapsed": self.collapse.collapsed,
                "params": self.params, "ticking": self.repair.ticking,
                "replicas_stale": self.rendezvous.stale, "paths": self.guard.state(),
                "reliable": None if self.publishing is None else self.publishing.state()}

    def restore(self, state: dict):
        """Continue from a checkpoint (after ``setup`` on the same shard)."""
        self.params = dict(state["params"])
        saved = {**state, "ticking": state["ticking"].copy(),
                 "replicas_stale": state["replicas_stale"].copy()}
        self._build(TreeState.from_state(state["tree"]), saved)
