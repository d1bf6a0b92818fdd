"""Pastry as a protocol stack on the emulator (ARCHITECTURE.md "Protocol-facing API").

``Pastry(app, params)`` owns the overlay state of one shard's nodes and drives the
application (Scribe) through the overlay API: ``route``/``send`` down, ``forward``/
``deliver``/``receive``/``new_leafs`` up. Every handler works on a whole sub-batch.

Bootstrap modes (``params["bootstrap"]``):

- ``oracle``: exact PNS state from :mod:`.oracle`, installed at setup;
- ``protocol``: the join protocol on the virtual clock (see :mod:`.join`).

Failures: every ``keepalive_us`` each live node sends a keep-alive to its leaf set; a
leaf silent for ``fail_timeout_us`` is presumed failed, removed from all of the node's
tables, and the leaf set is repaired by asking the surviving farthest leaf on each side
for its leaf set. Routing-table entries to a node presumed failed are dropped at once
and refilled lazily (ROW_REQ to another entry of the same row, then of the next rows).
"""

from __future__ import annotations

import numpy as np

from . import kernels
from . import types as T
from .join import JoinMixin
from .merge import group_rows
from .oracle import oracle_state
from .repair import RepairMixin
from .routing import next_hop
from .state import PastryState, check_params

try:  # the engine's definitions are the contract
    from emulator.batch import MSG_DTYPE, Batch, take_rows  # type: ignore
except ImportError:  # pragma: no cover - only before the engine lands
    from actors.scribe._engine import MSG_DTYPE, Batch  # same documented dtype

    def take_rows(m, idx):
        return m[idx]

DEFAULTS = {
    "bootstrap": "protocol",
    "b": 4,
    "l": 16,
    "m": 32,
    "keepalive_us": 0,             # 0: no keep-alives (stable overlay)
    "fail_timeout_us": 0,          # T; 0: 3 keep-alive periods
    "join_rate_per_s": 100.0,      # protocol bootstrap: mean node arrivals per second
    "join_start_us": 0,
    "join_settle_us": 2_000_000,   # a node is used as contact A this long after it joined
    "join_contact_fallback": "first",  # no contact settled yet: node 0 | "nearest" earlier
    "leaf_refresh_us": 2_000_000,  # protocol bootstrap: joined nodes look up their own id
                                   # (LEAF_LOOKUP) this often, until the last
                                   # arrival + join_settle_us (0: never)
    "leaf_refresh_rounds": 0,      # at most this many lookups per node (0: no bound)
    "table_maintenance_us": 0,     # routing-table maintenance period: one random entry
                                   # of each row is asked for its row (0: off)
    "join_exchange_rows": 2,       # second join stage: ask the nodes of table rows
                                   # 0..n-1 for their row and keep closer entries (0: off)
    "seed": 0,
    "dead_memory": 8,              # how many presumed-failed ids a node remembers
    "hop_ack": None,               # per-hop acks of routed messages; None: on iff keep-alives
    "ack_slack_us": 0,             # ack deadline = sent + 2 * latency + slack; 0: one cell
    "rejoin_timeout_us": 1_000_000,  # a recovering node tries its next contact after this
}

ROUTE_FIELDS = [n for n in MSG_DTYPE.names if n not in ("src", "dst", "type", "sent", "time",
                                                          "seq")]


def msgs_of(batch) -> np.ndarray:
    return batch.msgs if hasattr(batch, "msgs") else batch


def payload_of(batch) -> np.ndarray:
    p = getattr(batch, "payload", None)
    return np.zeros(0, np.int32) if p is None else np.asarray(p)


def make_batch(msgs, payload=None):
    try:
        return Batch(msgs, payload)
    except TypeError:  # pragma: no cover
        return Batch(msgs=msgs, payload=payload)


class Pastry(JoinMixin, RepairMixin):
    TYPE_NAMES = T.TYPE_NAMES

    def __init__(self, app, params: dict | None = None):
        params = dict(params or {})
        unknown = set(params) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"Pastry: unknown parameter(s) {sorted(unknown)}")
        self.params = {**DEFAULTS, **params}
        p = self.params
        if p["bootstrap"] not in ("oracle", "protocol"):
            raise ValueError(f"Pastry: bootstrap must be 'oracle' or 'protocol', got {p['bootstrap']!r}")
        check_params(p["b"], p["l"], p["m"])
        if p["keepalive_us"] < 0 or p["fail_timeout_us"] < 0:
            raise ValueError("Pastry: keepalive_us and fail_timeout_us must be >= 0")
        self.app = app
        self.state: PastryState | None = None
        self._lat_tables = None
        if app is not None and hasattr(app, "bind"):
            app.bind(self)

    # ---- stack interface ------------------------------------------------------------
    def setup(self, ctx):
        p = self.params
        self.ids_hi = np.asarray(ctx.shared("node_ids_hi"), np.uint64)
        self.ids_lo = np.asarray(ctx.shared("node_ids_lo"), np.uint64)
        if len(self.ids_hi) != ctx.n_nodes:
            raise ValueError("Pastry.setup: shared node_ids_hi must have one id per node")
        self.nodes = np.asarray(ctx.nodes, np.int64)
        n = len(self.nodes)
        if p["bootstrap"] == "oracle":
            self.state = oracle_state(self.nodes, self.ids_hi, self.ids_lo,
                                      ctx.shared("host_router"), ctx.shared("router_dist_us"),
                                      ctx.shared("lan_us"), b=p["b"], l=p["l"], m=p["m"],
                                      n_nodes=ctx.n_nodes)
            self.joined = np.ones(n, bool)
        else:
            self.state = PastryState.empty(n, ctx.n_nodes, p["b"], p["l"], p["m"])
            self.joined = np.zeros(n, bool)
        self.heard = np.zeros((n, p["l"]), np.int64)       # last keep-alive per leaf slot
        self.dead = np.full((n, p["dead_memory"]), -1, np.int32)
        self.dead_next = np.zeros(n, np.int64)
        self.join_setup(ctx)
        self.repair_setup(ctx, MSG_DTYPE)
        if p["keepalive_us"] and p["bootstrap"] == "oracle" and n:
            ctx.timer(self.nodes, np.full(n, p["keepalive_us"], np.int64), T.KA_TIMER)
        if self.app is not None:
            self.app.setup(ctx)

    def handle(self, ctx, type_code, batch):
        if T.is_pastry_type(type_code) and not (msgs_of(batch)["mode"] == 1).any():
            handler = self._HANDLERS.get(int(type_code))
            if handler is None:
                raise ValueError(f"Pastry: no handler for type {type_code}")
            handler(self, ctx, batch)
            return
        m = msgs_of(batch)
        routed = m["mode"] == 1
        if routed.any():
            r = take_rows(m, routed)
            if self.acks:
                # a node still (re)joining has no tables to route with: it stays silent,
                # so the sender presumes it failed and routes around it
                r = take_rows(r, self.joined[ctx.local(r["dst"])] | (r["src"] == r["dst"]))
                self._ack_hops(ctx, r)
            if len(r):
                self._route_step(ctx, r, payload_of(batch))  # r is a copy
        if (~routed).any() and T.is_pastry_type(type_code):
            self._HANDLERS[int(type_code)](self, ctx, make_batch(take_rows(m, ~routed), payload_of(batch)))
        elif (~routed).any() and self.app is not None:
            self.app.receive(ctx, make_batch(take_rows(m, ~routed), payload_of(batch)))

    def on_fail(self, ctx, local_idx):
        """A crashed node stops; its timers and incoming messages are dropped by the engine,
        and the hops it was waiting to see acknowledged are forgotten with it."""
        li = np.asarray(local_idx, np.int64)
        if len(li) and len(self.pend):
            self._keep_pending(~np.isin(self.pend["src"], self.nodes[li]))
        if self.app is not None:
            self.app.on_fail(ctx, li)

    def on_recover(self, ctx, local_idx, now=0):
        """A recovered node keeps its id but not its tables: it rejoins through the join
        protocol, with the nodes it knew (nearest first) as candidate contacts, so that its
        neighbours put it back into their leaf sets (see :meth:`JoinMixin.rejoin`).
        The engine must give the recovery time as ``ctx.now``."""
        li = np.asarray(local_idx, np.int64)
        now = int(getattr(ctx, "now", now) or now)
        if len(li):
            self.rejoin(ctx, li, now)
        if self.app is not None:
            self.app.on_recover(ctx, li)

    def checkpoint(self) -> dict:
        d = {"state": self.state.to_dict(), "joined": self.joined.copy(), "heard": self.heard.copy(),
             "dead": self.dead.copy(), "dead_next": self.dead_next.copy(),
             "join": self.join_checkpoint(), "repair": self.repair_checkpoint()}
        if self.app is not None:
            d["app"] = self.app.checkpoint()
        return d

    def restore(self, d: dict):
        self.state = PastryState.from_dict(d["state"])
        self.joined, self.heard = d["joined"].copy(), d["heard"].copy()
        self.dead, self.dead_next = d["dead"].copy(), d["dead_next"].copy()
        self.join_restore(d["join"])
        self.repair_restore(d["repair"])
        if self.app is not None and "app" in d:
            self.app.restore(d["app"])

    def dump(self, ctx, phase):
        if self.app is not None:
            return self.app.dump(ctx, phase)
        return None

    _HANDLERS = {**JoinMixin._HANDLERS, T.HOP_ACK: RepairMixin._hop_ack,
                 T.ACK_TIMER: RepairMixin._ack_timer, T.ROW_REQ: RepairMixin._row_req,
                 T.ROW_REPLY: RepairMixin._row_reply}

    def export_state(self, ctx=None):
        """(global node ids, state dict) of this shard, for :func:`quality.stack_states`
        (``emu.call("export_state")`` passes the shard's ctx, which is not needed)."""
        return self.nodes.copy(), self.state.to_dict()

    # ---- overlay API ----------------------------------------------------------------
    def send(self, ctx, src, dst, type, sent, **fields):
        """Direct message to a known node (mode 0)."""
        fields.setdefault("mode", 0)
        ctx.send(src, dst, type, sent, **fields)

    def route(self, ctx, src, key_hi, key_lo, type, sent, randomize=False, **fields):
        """Route messages from local nodes ``src`` towards 128-bit keys (mode 1).

        ``randomize``: the first hop is a node drawn uniformly from the sender's leaf set
        and routing table (Pastry's randomized routing, used to step off a route that
        loops or meets a faulty node); the route continues normally from there."""
        src = np.atleast_1d(np.asarray(src, np.int64))
        n = len(src)
        if n == 0:
            return
        m = np.zeros(n, MSG_DTYPE)
        m["src"] = m["dst"] = src
        m["time"] = m["sent"] = sent
        m["type"] = type
        m["key_hi"], m["key_lo"] = key_hi, key_lo
        m["origin"] = src
        m["group"] = -1
        for k, v in fields.items():
            m[k] = v
        m["mode"] = 1
        if randomize:
            first = self._random_known(ctx, src)
            jump = first >= 0
            self._send_hop(ctx, take_rows(m, jump), first[jump])
            m = take_rows(m, ~jump)
        self._route_step(ctx, m, None)

    def _random_known(self, ctx, nodes) -> np.ndarray:
        """A uniformly drawn non-empty leaf-set or routing-table entry per node (-1: none)."""
        li = np.asarray(ctx.local(nodes), np.int64)
        known = np.concatenate([self.state.leaf[li], self.state.rt[li].reshape(len(li), -1)],
                               axis=1)
        valid = known >= 0
        count = valid.sum(axis=1)
        pick = np.floor(ctx.random(nodes) * np.maximum(count, 1)).astype(np.int64)
        # the pick-th valid entry of each row
        col = np.argmax(np.cumsum(valid, axis=1) > pick[:, None], axis=1)
        return np.where(count > 0, known[np.arange(len(li)), col], -1)

    def _send_hop(self, ctx, out, nh) -> None:
        """Send routed messages ``out`` (now at out['dst']) one hop on to ``nh``."""
        if not len(out):
            return
        out = out.copy()
        out["src"] = out["dst"]
        out["dst"] = nh
        out["hops"] += 1
        lat = np.asarray(ctx.latency(out["src"], nh), np.int64)
        out["path_us"] += lat
        if hasattr(ctx, "send_batch"):  # the same message as the send below, in one copy
            hop = out.copy()
            hop["sent"] = out["time"]
            hop["seq"] = hop["pay_off"] = hop["pay_len"] = 0
            ctx.send_batch(hop)
        else:
            ctx.send(out["src"], out["dst"], out["type"], out["time"],
                     **{k: out[k] for k in ROUTE_FIELDS if k not in ("pay_off", "pay_len")})
        self._expect_acks(ctx, out, lat)

    def replica_set(self, ctx, nodes, k: int) -> np.ndarray:
        """The k nodes numerically closest to each local node, from its leaf set."""
        li = np.asarray(ctx.local(np.asarray(nodes, np.int64)), np.int64)
        if len(li) and li.min() < 0:
            raise ValueError("Pastry.replica_set: nodes must be local to this shard")
        half = self.state.half
        leaf = self.state.leaf[li]
        out = np.full((len(li), k), -1, np.int32)
        # alternate nearest smaller / nearest larger: the leaf set is ordered nearest first
        inter = np.stack([leaf[:, :half], leaf[:, half:]], axis=2).reshape(len(li), -1)
        for row in range(len(li)):  # k and l are small; rows are the RPs of one request
            got = inter[row][inter[row] >= 0][:k]
            out[row, :len(got)] = got
        return out

    # ---- routing --------------------------------------------------------------------
    def _route_step(self, ctx, m, payload, upcall=True):
        """One routing step for messages now at ``m['dst']`` (local, alive). ``upcall``
        False: a message re-routed after a lost hop; the node already ran ``forward``."""
        li = np.asarray(ctx.local(m["dst"]), np.int64)
        if len(li) and li.min() < 0:
            raise ValueError("Pastry: a routed message for another shard's node reached this shard")
        # a node's lookup of its own id routes as if the node were absent (join.py)
        exclude = np.where(m["type"] == T.LEAF_LOOKUP, m["origin"], -1)
        nxt, _rule = next_hop(self.state, li, m["dst"], m["key_hi"], m["key_lo"], self.ids_hi,
                              self.ids_lo, exclude=exclude)
        own = (m["type"] >= 10) & (m["type"] <= 49)
        here = nxt < 0
        if here.any():
            d = take_rows(m, here)
            ctx.log("route", origin=d["origin"].astype(np.int32), root=d["dst"].astype(np.int32),
                    type=d["type"].astype(np.int16), start=(d["time"] - d["path_us"]).astype(np.int64),
                    end=d["time"].astype(np.int64), hops=d["hops"].astype(np.int16),
                    path_us=d["path_us"].astype(np.int64))
            if (here & own).any():
                self._deliver_own(ctx, take_rows(m, here & own), rows=upcall)
            if (here & ~own).any() and self.app is not None:
                self.app.deliver(ctx, make_batch(take_rows(m, here & ~own), payload))
        go_parts = []
        if (~here & own).any():
            sub = take_rows(m, ~here & own)
            if upcall:
                self._forward_own(ctx, sub)
            go_parts.append((sub, nxt[~here & own]))
        if (~here & ~own).any():
            sub, nh = take_rows(m, ~here & ~own), nxt[~here & ~own]
            if self.app is not None and upcall:
                b2, nh = self.app.forward(ctx, make_batch(sub, payload), nh)
                sub = msgs_of(b2)
            go_parts.append((sub, np.asarray(nh, np.int64)))
        for sub, nh in go_parts:
            go = nh >= 0
            if go.any():
                self._send_hop(ctx, take_rows(sub, go), nh[go])

    # ---- state helpers shared by join and repair --------------------------------------
    def _remember_dead(self, li, dead_ids):
        """Record presumed-failed ids (ring buffer per node) and drop them from all tables."""
        if not len(li):
            return
        s = self.state
        cols = self.dead_next[li] % self.dead.shape[1]
        self.dead[li, cols] = dead_ids
        np.add.at(self.dead_next, li, 1)
        for arr in (s.leaf, s.nbr):
            hit = arr[li] == np.asarray(dead_ids)[:, None]
            r, c = np.nonzero(hit)
            arr[li[r], c] = -1
        # close the holes in each leaf-set side (nearest first), moving keep-alive clocks along
        ul = np.unique(li)
        for side in (slice(0, s.half), slice(s.half, s.l)):
            part = s.leaf[ul, side]
            o = np.argsort(part < 0, axis=1, kind="stable")
            s.leaf[ul, side] = np.take_along_axis(part, o, axis=1)
            self.heard[ul, side] = np.take_along_axis(self.heard[ul, side], o, axis=1)
        rt = s.rt[li].reshape(len(li), -1)
        r, c = np.nonzero(rt == np.asarray(dead_ids)[:, None])
        flat = s.rt.reshape(len(s.rt), -1)
        flat[li[r], c] = -1

    def _latency_tables(self, ctx):
        """(host_router, router_dist_us, lan_us) of the engine's latency model, for the
        kernels that probe delays (the model's arrays, or the same shared inputs)."""
        if self._lat_tables is None:
            tables = getattr(ctx, "latency_tables", None)
            if tables is not None:
                hr, rdist, lan = tables()
            else:  # a context without the engine's model: the shared inputs it came from
                hr, rdist, lan = (ctx.shared("host_router"), ctx.shared("router_dist_us"),
                                  ctx.shared("lan_us"))
            self._lat_tables = (np.ascontiguousarray(hr, np.int32),
                                np.ascontiguousarray(rdist, np.int32), int(lan))
        return self._lat_tables

    def _forget_dead(self, li, senders):
        """A node we hear from directly is alive: drop it from the dead memory (a node
        presumed failed by mistake, or recovered, may be re-admitted to the tables)."""
        li = np.asarray(li, np.int64)
        if len(li):
            hit = self.dead[li] == np.asarray(senders, np.int64)[:, None]
            r, c = np.nonzero(hit)
            self.dead[li[r], c] = -1

    def _merge_leaves(self, ctx, li, cand, t):
        """Merge candidate ids into leaf sets (rows of one node are combined); returns
        (nodes' local indices, changed mask, added members). Dead-known ids stay out.
        Fires ``app.new_leafs``."""
        s = self.state
        li, cand, t = group_rows(li, cand, t)
        old = s.leaf[li]
        new = kernels.select_leaves(self.nodes[li], np.concatenate([old, cand], axis=1),
                                    self.ids_hi, self.ids_lo, s.half, self.dead[li])
        changed, added, heard = kernels.leaf_changes(old, new, self.heard[li],
                                                     np.ascontiguousarray(t, np.int64))
        if changed.any():
            # keep-alive clocks follow their nodes; newcomers count as just heard
            self.heard[li] = heard
            s.leaf[li] = new
            if self.app is not None:
                self.app.new_leafs(ctx, li[changed])
        return li, changed, added

    def _insert_table(self, ctx, li, cand):
        li = np.ascontiguousarray(li, np.int64)
        cand = np.ascontiguousarray(cand, np.int64)
        hr, rdist, lan = self._latency_tables(ctx)
        # presumed-failed nodes (self.dead) stay out until heard from directly
        probes = kernels.insert_table(self.state.rt, li, self.nodes[li], cand, self.ids_hi,
                                      self.ids_lo, self.state.b, hr, rdist, lan, self.dead[li])
        if probes:
            ctx.count("pastry_probes", probes)
