"""The shard as a Ray actor: a ShardEngine plus peer-to-peer message exchange, event logs
and checkpoints. It knows no protocol: the stack comes from `stack_factory`.

Logs and checkpoints go where the driver says (emulator/storage.py): Parquet files and
checkpoint files under a `Storage` root (the run directory on one machine, or the
`run.storage` the user named), or, for the hand-off on a cluster without shared storage,
Arrow IPC tables returned to the driver as object refs (RayDP's JVM reads them straight
from the object store) and checkpoint state returned to the driver, which keeps it.

No message goes through the driver, and the driver is not in the windows. It starts a
*round* (`run_round`: process every cell before a grid point `limit`) on every shard
that may have work before it, and the shards synchronise among themselves by null
messages (Chandy-Misra-Bryant with lookahead): each push to a peer (`deliver`) carries,
besides the outgoing batch if there is one, a promise that nothing else from this shard
will arrive there before ``eit + L[i, j]``, eit being the earliest time anything can still
happen on this shard (its next event, or the least promise it holds from its peers). A
shard runs every cell before the least promise it holds, pushes, waits for a promise to
rise, and again, until it reaches `limit`; then it waits for its pushes to land and
reports its next event time.

Promises go where they bind. A shard pushes a bare promise (no batch) only to the peers it
is *eager* for in this round: those it is the nearest shard to (least lookahead into them,
the likely holder of their least promise) and those that asked (`want`) this round. A shard
blocked on a promise from a peer that is not eager for it asks once per round; the peer
answers at once from its last promise if that is higher, and pushes it every rise for the
rest of the round. At K = 2 every peer is the nearest, so each gets every promise; at
larger K only the bare promises that bind are sent (benchmarks/bench_scale.py counts bare
promises and asks per window). Batches always go, with a promise.

A promise holds for the rest of the driver's `run` call it was made in (its *era*, the
number of that call's first round): between two calls the driver may inject stimuli due
before what an idle shard promised at the end of the last one, so a shard starting a
round of a new era drops the promises of older eras (the driver's `earliest` bounds the
peers instead) and starts its own afresh; a push carries its era and one from an older era
binds nothing. Within an era a late promise is never wrong. Actor threads may run calls
out of order, so each push is numbered per sender and applied in order. The
actor runs with ``max_concurrency=2`` so a peer's `deliver` (or `want`) lands while this
shard is busy in its round.

A push to a shard of the same Ray node is no Ray call: it goes over a local link
(emulator/local_link.py), sent once the shard's lock is released, and a reader thread of
the peer applies it with the same `deliver`; a round's end waits for each link's `sync`
where it waits for the Ray pushes' calls. The pushes made at once to the shards of another
node go in one Ray call (`deliver_many`) to that node's gateway, its lowest shard, which
passes them on over its own links; a round's end then waits for the gateway's
`sync_links` too.

Large read-only inputs (the latency tables, node ids, group tables) arrive as object-store
references and are read zero-copy.
"""

from __future__ import annotations

import cProfile
import pickle
import threading
import time
from pathlib import Path

import numpy as np
import ray

from . import heads as round_heads
from . import heap
from .engine import ShardEngine
from .local_link import LinkClient, LinkClosed, LinkServer
from .logs import TOPO_FIELD, with_topo
from .queue import NEVER
from .storage import ipc_bytes

# A shard must accept deliveries while it runs a round: two threads, one for `run_round`
# (and the other driver calls, which never overlap it) and one for peers' `deliver`.
SHARD_CONCURRENCY = 2

# How long a shard waiting for a peer's promise sleeps before it checks that its own pushes
# have not failed (a peer that died): a dead peer otherwise leaves it waiting until the
# driver, which sees the death first, stops the run.
CHECK_PEERS_EVERY_S = 2.0

# A shard leaves a round early after this many wake-ups in a row that brought it nothing to
# run (see `run_round`): enough to ride out a gap of a few round trips between messages
# without a driver round, few enough that an idle stretch costs a handful of promise
# exchanges rather than one per round trip until the round's end.
IDLE_WAKES_BEFORE_LEAVING = 3

# Finished pushes are collected (their errors raised) once this many are outstanding.
PRUNE_PUSHES_ABOVE = 256


def _resolve(value):
    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


def _int64s(values) -> np.ndarray:
    """int64 array of the driver's raw bytes (or of an array: above 64 shards it shares
    one copy through the object store)."""
    if isinstance(values, bytes):
        return np.frombuffer(values, np.int64)
    return np.asarray(values, np.int64)


def _plus(t, delay):
    """t + delay for int64 arrays or ints, NEVER where either is NEVER (no overflow)."""
    return np.minimum(t, NEVER - delay) + delay


class RelayedError(Exception):
    """A round relayed through the shards (`ShardActor.relay_round`) failed on shard
    `shard` with `error` (a RayActorError when that shard's process died)."""

    def __init__(self, shard: int, error: BaseException):
        super().__init__(shard, error)
        self.shard = int(shard)
        self.error = error

    def __str__(self) -> str:
        return f"shard {self.shard}: {type(self.error).__name__}: {self.error}"


@ray.remote
class ShardActor:
    def __init__(self, shard_id, node_shard, latency, stack_factory, seed, delta_us, shared,
                 log_messages, storage, topo_index, handoff, message_dtype, message_log_fields):
        self.engine = ShardEngine(shard_id, node_shard, latency, stack_factory, seed, delta_us,
                                  shared=shared, resolve=_resolve, log_messages=log_messages,
                                  message_dtype=message_dtype,
                                  message_log_fields=message_log_fields)
        self.storage = storage          # a Storage, or None: nothing written by the shard
        self.handoff = bool(handoff)    # keep log tables for the driver (object store)
        self.topo_index = int(topo_index)
        self._stash = []
        self._peers: list = []
        # what peers deliver: batches for the queue, and per peer the promise that nothing
        # else from it arrives before promise_in[peer] (guarded by _cond)
        self._cond = threading.Condition()
        self._inbox: list = []
        self._promise_in = np.zeros(0, np.int64)
        self._promise_era = np.zeros(0, np.int64)   # per peer: the era of promise_in
        self._era = -1                              # the era of this shard's last round
        self._seq_in = np.zeros(0, np.int64)     # per peer: the next push number to apply
        self._held: dict = {}                    # pushes that ran before an earlier one
        self._left_in = np.zeros(0, np.int64)    # per peer: the last round it left early
        self._notices = 0                        # leave notices applied so far
        self._aborted = -1                       # the last round in which a peer failed
        # what this shard pushed: per peer, pushes numbered and the last promise made
        # (pushes may also leave from the second thread, answering a `want`: under _cond)
        self._seq_out = np.zeros(0, np.int64)
        self._promised = np.zeros(0, np.int64)
        # the promises this shard could make now (those of its last pushes), the peers it
        # pushes bare promises to (nearest, or: the round in which they asked), the round
        # in which this shard last asked each peer, and answers pushed from the second thread
        self._promise_now = np.zeros(0, np.int64)
        self._nearest = np.zeros(0, bool)
        self._nearest_in = np.zeros(0, bool)
        self._asked_in = np.zeros(0, np.int64)
        self._asked_out = np.zeros(0, np.int64)
        self._answers: list = []
        self._answer_calls: list = []             # gateways' calls carrying answers
        self._profiles: dict | None = None       # phase -> cProfile of its rounds, when on
        # pushes to the peers of this machine go over local links (emulator/local_link.py),
        # the others as Ray calls; a link that closed means its peer's process died
        self._link_server: LinkServer | None = None
        self._links: dict[int, LinkClient] = {}
        self._link_lost: BaseException | None = None
        # pushes to the peers of another machine go in one Ray call per machine, to its
        # gateway (its first shard), which passes them on over its local links: the peer's
        # gateway, and the gateways pushed to in this round (guarded by _cond)
        self._via: dict[int, int] = {}
        self._via_used: set = set()

    def ready(self) -> int:
        """The shard's earliest pending event (timers its stack set up), once set up."""
        heap.freeze_survivors()     # the set-up's objects live as long as the shard
        return self.engine.queue.next_time()

    def link_address(self) -> tuple[str, str]:
        """(this process's Ray node, the address of its end for local links), the end
        made at the first call."""
        if self._link_server is None:
            self._link_server = LinkServer(self.deliver, self._link_closed,
                                           self.engine.message_dtype)
        return self.node_id(), self._link_server.address

    def link_peers(self) -> list[int]:
        """The peers this shard pushes to over local links."""
        return sorted(self._links)

    def _link_closed(self, src, error) -> None:
        """A link from peer `src` ended: its process died (`error` None), or applying its
        push raised `error`; the round waiting raises it."""
        with self._cond:
            self._link_lost = error if error is not None else \
                LinkClosed("a peer shard's local link closed: its process died")
            self._cond.notify()

    def connect(self, peers, lookahead, links=None) -> None:
        """The handles of every shard (this one included), indexed by shard id, the
        lookahead matrix (least latency from a host of shard i to one of shard j), and
        `links`: each shard's `link_address` (None: every push a Ray call). Pushes to the
        shards of this one's Ray node go over local links."""
        j = self.engine.shard_id
        k = len(peers)
        self._peers = list(peers)
        if links is not None:
            node = links[j][0]
            self._links = {p: LinkClient(address, j) for p, (where, address) in enumerate(links)
                           if p != j and where == node}
            gateway: dict = {}
            for p, (where, _) in enumerate(links):
                gateway.setdefault(where, p)
            self._via = {p: gateway[where] for p, (where, _) in enumerate(links)
                         if where != node}
        self._look_out = np.array(lookahead[j], np.int64)       # to each peer
        self._look_in = np.array(lookahead[:, j], np.int64)     # from each peer
        self._look_out[j] = self._look_in[j] = NEVER
        self._promise_in = np.zeros(k, np.int64)
        self._promise_in[j] = NEVER
        self._promise_era = np.full(k, -1, np.int64)
        self._seq_in = np.zeros(k, np.int64)
        self._left_in = np.full(k, -1, np.int64)
        self._seq_out = np.zeros(k, np.int64)
        self._promised = np.full(k, -1, np.int64)
        self._promise_now = np.zeros(k, np.int64)
        look = np.array(lookahead, np.int64)
        np.fill_diagonal(look, NEVER)
        self._nearest = look[j] <= look.min(axis=0)    # no shard is nearer to them than j
        self._nearest[j] = False
        self._nearest_in = look[:, j] <= look[:, j].min()   # peers that push to j unasked
        self._nearest_in[j] = False
        self._asked_in = np.full(k, -1, np.int64)
        self._asked_out = np.full(k, -1, np.int64)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    # ---- message exchange -------------------------------------------------------------
    def deliver(self, src, seq, era, promise, batch=None, leaving=-1) -> None:
        """Push number `seq` from shard `src`: a batch for this shard (or None), the
        promise that nothing else from `src` arrives before `promise` in era `era`, and
        `leaving`: the number of the round `src` just left early (-1: none). Runs on the
        second thread, beside the round; applied in `seq` order per sender."""
        with self._cond:
            if seq != self._seq_in[src]:
                self._held[(src, seq)] = (era, promise, batch, leaving)
                return
            while True:
                if batch is not None:
                    self._inbox.append(batch)
                if era > self._promise_era[src]:      # the first of a new era
                    self._promise_era[src] = era
                    self._promise_in[src] = promise
                elif era == self._promise_era[src] and promise > self._promise_in[src]:
                    self._promise_in[src] = promise
                if leaving >= 0:
                    self._left_in[src] = leaving
                    self._notices += 1
                seq += 1
                if (src, seq) not in self._held:
                    break
                era, promise, batch, leaving = self._held.pop((src, seq))
            self._seq_in[src] = seq
            self._cond.notify()

    def want(self, src, number, above) -> None:
        """Shard `src`, in round `number`, waits for a promise above `above` from this one:
        push it at once if the last promise made is higher, and push every rise to `src`
        for the rest of that round. Runs on the second thread."""
        local = []
        with self._cond:
            self._asked_in[src] = max(self._asked_in[src], number)
            if self._promise_now[src] > above and self._promise_now[src] > self._promised[src]:
                push = self._push(src, int(self._promise_now[src]), None, -1)
                self._answers.append(push)
                local.append(push)
        calls = self._send_local(local)
        if local and src in self._via:   # a gateway's call: the round's end waits for it
            with self._cond:
                self._answer_calls += calls

    def _push(self, k, promise, batch, leaving):
        """Push number seq_out[k] to peer k (call under _cond: both threads push): a Ray
        call's ref, or for a peer of a local link or of another machine's gateway the push
        itself, which :meth:`_send_local` sends once the lock is released (a send may wait
        for the peer to read, and the peer's reader may wait for its own lock)."""
        seq = int(self._seq_out[k])
        self._seq_out[k] += 1
        if promise > self._promised[k]:
            self._promised[k] = promise
        if k in self._links or k in self._via:
            return (k, seq, self._era, promise, batch, leaving)
        return self._peers[k].deliver.remote(self.engine.shard_id, seq, self._era, promise,
                                             batch, leaving)

    def _send_local(self, pushes) -> list:
        """Send `pushes` (outside `_cond`): those to peers of this machine over their
        local links, those to another machine's peers in one `deliver_many` call to its
        gateway; returns the Ray refs (those calls, and the pushes made as Ray calls)."""
        refs = []
        via: dict = {}
        for p in pushes:
            if not isinstance(p, tuple):
                refs.append(p)
            elif p[0] in self._links:
                k, seq, era, promise, batch, leaving = p
                self._links[k].push(seq, era, promise, batch, leaving)
            else:
                via.setdefault(self._via[p[0]], []).append(p)
        if via:
            me = self.engine.shard_id
            refs += [self._peers[g].deliver_many.remote(me, group) for g, group in via.items()]
            with self._cond:
                self._via_used.update(via)
        return refs

    def deliver_many(self, src, pushes) -> None:
        """Pushes of shard `src` of another machine (each ``(peer, seq, era, promise,
        batch, leaving)``), this shard being their gateway on its machine: its own are
        applied as `deliver` applies them, the others passed on over its local links (their
        order per peer kept; `sync_links` waits until they are applied). Runs on the second
        thread."""
        me = self.engine.shard_id
        for k, seq, era, promise, batch, leaving in pushes:
            if k == me:
                self.deliver(src, seq, era, promise, batch, leaving)
            else:
                self._links[k].push(seq, era, promise, batch, leaving, src=src)

    def sync_links(self) -> None:
        """Return once the peers of this machine applied everything this shard pushed or
        passed on to them so far."""
        for link in self._links.values():
            link.sync()

    def _take_answers(self) -> tuple[list, int]:
        """(the Ray calls among the `want` answers since the last take, with the gateways'
        calls that carried the others to another machine, how many answers there were);
        call under `_cond`. `want` sent the local-link ones itself."""
        answers, self._answers = self._answers, []
        calls, self._answer_calls = self._answer_calls, []
        return [p for p in answers if not isinstance(p, tuple)] + calls, len(answers)

    def abort(self, src, number) -> None:
        """Shard `src` failed in round `number`: this shard's round of that number stops
        waiting (also when the notice lands before that round starts here)."""
        with self._cond:
            self._aborted = max(self._aborted, number)
            self._cond.notify()

    def _take_inbox(self) -> list:
        with self._cond:
            inbox, self._inbox = self._inbox, []
        return inbox

    def run_round(self, number, era, limit, phase, earliest, *injected):
        """Round `number` of era `era` (see the module docstring): process every cell
        before `limit` (a grid point), synchronising with the peers by promises, and return
        its head (emulator/heads.py: the next local event time and the round's stats).
        `earliest[i]` is, from the driver's view at the round's start, the earliest time
        anything can happen on shard i (its next event, or one a chain of messages from
        another shard's could cause); shards with ``earliest >= limit`` take no part.

        A shard leaves the round early when waiting has stopped paying: after
        IDLE_WAKES_BEFORE_LEAVING promises in a row that brought it neither a message nor
        an event to run (every shard is idle and the promises would only creep forward
        by round trips), or when the promise it waits for is from a shard that left. It
        tells its peers and returns; the round then ends before `limit` (stats["left"])
        and the driver starts the next one from where every shard stands, jumping the
        idle stretch. stats["sent_min"] maps each peer to the earliest arrival pushed to
        it at or after `limit` (still in its inbox); stats["reached"] is the grid point
        before which this shard processed every cell, and stats["pushed"] lists
        (peer, earliest, latest arrival) of each batch pushed with arrivals before `limit`,
        which a peer that left early may not have run: from these the driver bounds the
        next event of a shard that left without asking it (Emulator.run)."""
        try:
            nxt, stats = self._round(int(number), int(era), int(limit), phase,
                                     _int64s(earliest), injected)
            return round_heads.head(self.engine.shard_id, nxt, stats)
        except BaseException:
            self._abort_peers(number)
            raise

    def relay_round(self, plan, number, era, limit, phase, earliest, injected):
        """`run_round` on this shard and, through a tree of these calls, on the other shards
        of the round: the driver makes one call whatever the number of shards (O(log K)
        hops to reach them all, each shard calling at most `fanout`).

        plan = (due, fanout, position): `due` lists the round's shards and this one sits at
        `position` of the `fanout`-ary tree laid over it in order (children of position p:
        p*fanout + 1 .. p*fanout + fanout). `injected` maps a shard to the refs of the
        stimuli the driver holds for it. Children are called before this shard's own round
        starts (their rounds need each other's promises), and a child that fails stops this
        shard's round at once (`_watch_children`) so that the failure climbs the tree rather
        than waiting for promises that will never come. Returns the heads of this subtree
        joined (emulator/heads.py); an error leaves as RelayedError naming its shard."""
        me = self.engine.shard_id
        due, fanout, pos = plan
        kids = range(pos * fanout + 1, min(pos * fanout + fanout + 1, len(due)))
        calls = {self._peers[due[c]].relay_round.remote(
                     (due, fanout, c), number, era, limit, phase, earliest, injected): due[c]
                 for c in kids}
        stop = threading.Event()
        if calls:
            threading.Thread(target=self._watch_children, args=(list(calls), int(number), stop),
                             daemon=True).start()
        try:
            own = [ray.get(r) for r in injected.get(me, ())]
            heads = [self.run_round(number, era, limit, phase, earliest, *own)]
            left = list(calls)
            while left:
                done, left = ray.wait(left, num_returns=1)
                heads.append(self._child_heads(done[0], calls[done[0]]))
            return round_heads.join(heads)
        except RelayedError:
            self._abort_peers(number)
            raise
        except BaseException as e:
            self._abort_peers(number)
            raise RelayedError(me, e) from None
        finally:
            stop.set()

    def _watch_children(self, refs, number, stop) -> None:
        """Stop this shard's round `number` when a child's call fails (runs beside it)."""
        left = refs
        while left and not stop.is_set():
            done, left = ray.wait(left, num_returns=1, timeout=0.5)
            for ref in done:
                try:
                    ray.get(ref)
                except BaseException:  # noqa: BLE001 - its error is raised by relay_round
                    self.abort(-1, number)
                    return

    @staticmethod
    def _child_heads(ref, shard) -> tuple:
        """A child's subtree of heads, joined; its error as RelayedError naming the failed shard."""
        try:
            return ray.get(ref)
        except BaseException as e:
            cause = e.cause if isinstance(e, ray.exceptions.RayTaskError) else None
            if isinstance(cause, RelayedError):     # failed below the child
                raise RelayedError(cause.shard, cause.error) from None
            raise RelayedError(shard, e) from None  # the child's process died

    def _abort_peers(self, number) -> None:
        for k, peer in enumerate(self._peers):
            if k != self.engine.shard_id:
                peer.abort.remote(self.engine.shard_id, int(number))

    def profile_rounds(self, on: bool = True) -> None:
        """Profile this shard's rounds from now on (``on``), one profile per phase, with
        the thread's CPU clock: a function's time is the CPU it used, not the time the
        process waited for a core, which on a host with more shard processes than cores
        the wall clock would count (benchmarks/bench_scale.py --profile-shards). The
        profiles made so far are dropped (on again: they start afresh)."""
        self._profiles = {} if on else None

    def dump_profiles(self, directory: str) -> list[str]:
        """Write each phase's profile (pstats) to ``directory``/shard<k>-<phase>.prof;
        returns the paths written."""
        out = []
        for phase, prof in (self._profiles or {}).items():
            path = Path(directory) / f"shard{self.engine.shard_id}-{phase}.prof"
            path.parent.mkdir(parents=True, exist_ok=True)
            prof.dump_stats(str(path))
            out.append(str(path))
        return out

    def _round(self, number, era, limit, phase, earliest, injected):
        if self._profiles is None:
            return self._round_work(number, era, limit, phase, earliest, injected)
        prof = self._profiles.get(phase)
        if prof is None:
            prof = self._profiles[phase] = cProfile.Profile(time.thread_time_ns, 1e-9)
        prof.enable()
        try:
            return self._round_work(number, era, limit, phase, earliest, injected)
        finally:
            prof.disable()

    def _round_work(self, number, era, limit, phase, earliest, injected):
        engine = self.engine
        me, d = engine.shard_id, engine.delta_us
        running = earliest < limit          # peers that take part and have not left
        running[me] = False
        with self._cond:
            if era > self._era:
                # promises of older eras may be void (see the module docstring): drop those
                # held, and promise afresh (an answer to a `want` waits for this round's)
                self._era = era
                old = self._promise_era < era
                self._promise_in[old] = 0
                self._promise_era[old] = era
                self._promise_in[me] = NEVER
                self._promised[:] = -1
                self._promise_now[:] = 0
            # what the driver knows already bounds what each peer can still send
            np.maximum(self._promise_in, _plus(earliest, self._look_in), out=self._promise_in)
        stats = {"events": 0, "python_events": 0, "busy_s": 0.0, "cpu_s": 0.0, "wait_s": 0.0,
                 "windows": 0,
                 "done_until": engine.done_until, "left": False, "promises": 0, "wants": 0}
        pushes, sent_min, pushed = [], {}, []
        pending = list(injected)
        idle_wakes = 0
        leaving = False
        while True:
            with self._cond:
                news = bool(self._inbox)
                pending += self._inbox
                self._inbox = []
                least = int(self._promise_in.min())
                running &= self._left_in != number
                # the least promise can no longer rise: a shard that left holds it
                stuck = bool((~running & (self._left_in == number)
                              & (self._promise_in == least)).any())
                notices = self._notices
            safe = min(least, limit)
            end = safe - safe % d
            outs = None
            # (a new phase's stimuli may be due before where the last round ended: `now`
            # is the last cell processed, so every round checks the queue from the start)
            if pending or engine.queue.next_time() < end:
                _, outs, st = engine.advance(end, phase, pending)
                pending = []
                stats["windows"] += 1
                for key in ("events", "python_events", "busy_s", "cpu_s"):
                    stats[key] += st[key]
                stats["done_until"] = st["done_until"]
                news = news or st["events"] > 0
            reached = end        # every cell before it is processed
            idle_wakes = 0 if news else idle_wakes + 1
            if reached < limit and (idle_wakes > IDLE_WAKES_BEFORE_LEAVING or stuck):
                leaving = True       # waiting would creep, or wait for a shard that left
            # nothing more can happen here before `eit`, so nothing from here arrives at
            # peer k before eit + L[me, k]
            eit = min(engine.queue.next_time(), safe)
            promise = _plus(eit, self._look_out)
            made = []
            with self._cond:
                eager = self._nearest | (self._asked_in == number)
                for k in range(len(self._peers)):
                    batch = outs[k] if outs is not None and len(outs[k]) else None
                    if batch is None and not (running[k] and (leaving or (
                            eager[k] and promise[k] > self._promised[k] < limit))):
                        continue         # no news for k, or k needs none to finish
                    if batch is not None:
                        t = batch.msgs["time"]
                        later = t[t >= limit]         # the rest k runs in this round
                        if len(later):
                            sent_min[k] = min(sent_min.get(k, NEVER), int(later.min()))
                        if len(later) < len(t):       # k runs these unless it leaves first
                            pushed.append((k, int(t.min()), int(t.max())))
                    else:
                        stats["promises"] += 1
                    made.append(self._push(k, int(promise[k]), batch,
                                           number if leaving else -1))
                # a `want` may be answered from here on with these: every batch made
                # before them has been pushed ahead of the answer
                np.maximum(self._promise_now, promise, out=self._promise_now)
                refs, answered = self._take_answers()
                pushes += refs
                stats["promises"] += answered
                if not (reached >= limit or leaving):
                    # ask the peers holding the least promise that push none unasked
                    ask = np.flatnonzero(running & (self._promise_in == least)
                                         & ~self._nearest_in & (self._asked_out < number))
                    for m in ask.tolist():
                        self._asked_out[m] = number
                        pushes.append(self._peers[m].want.remote(me, number, least))
                    stats["wants"] += len(ask)
            pushes += self._send_local(made)
            if len(pushes) > PRUNE_PUSHES_ABOVE:
                pushes = self._prune(pushes)
            if reached >= limit or leaving:
                break
            t0 = time.perf_counter()
            aborted = self._wait_for_promises(number, least, notices, pushes)
            stats["wait_s"] += time.perf_counter() - t0
            if aborted:      # a peer failed: the driver reports its error, not ours
                stats["left"] = True
                break
        t0 = time.perf_counter()
        with self._cond:
            pushes += self._take_answers()[0]
        ray.get(pushes)   # the driver must not start the next round before peers hold them
        for link in self._links.values():
            link.sync()
        with self._cond:
            gateways, self._via_used = self._via_used, set()
        ray.get([self._peers[g].sync_links.remote() for g in sorted(gateways)])
        if self._link_lost is not None:    # (a round that never waited still reports it)
            raise self._link_lost
        stats["wait_s"] += time.perf_counter() - t0
        stats["sent_min"] = sent_min
        stats["pushed"] = pushed
        stats["reached"] = reached
        stats["left"] = stats["left"] or leaving
        return engine.queue.next_time(), stats

    def _wait_for_promises(self, number, least, notices, pushes) -> bool:
        """Sleep until the least promise held passes `least`, or a peer leaves a round
        (more than `notices` leave notices); True if a peer's round `number` failed
        instead."""
        while True:
            with self._cond:
                if self._aborted >= number:
                    return True
                if self._link_lost is not None:
                    raise self._link_lost
                if self._promise_in.min() > least or self._notices > notices:
                    return False
                if self._cond.wait(CHECK_PEERS_EVERY_S):
                    continue
            self._prune(pushes)   # raises if a push failed: the peer is gone

    @staticmethod
    def _prune(pushes) -> list:
        """The pushes still in flight; raises the error of one that failed."""
        done, left = ray.wait(pushes, num_returns=len(pushes), timeout=0)
        ray.get(done)
        return left

    def accept(self, *injected) -> int:
        """Take the inbox and any injected batches into the queue; the next event time."""
        self.engine.accept([*self._take_inbox(), *injected])
        return self.engine.queue.next_time()

    # ---- stack calls, logs, checkpoints -------------------------------------------------
    def call(self, method, *args, phase=None):
        return self.engine.call(method, *args, phase=phase)

    def flush(self, phase_stem: str) -> list[tuple]:
        """Take the buffered log rows: Parquet under the storage, and for the hand-off the
        tables (with `topo`) kept for `take_tables`. Returns (table, Arrow schema, rows) of
        each non-empty table, sorted by name."""
        # the phase's freed temporaries and its burst's queue room go back to the system
        # before the logs take fresh memory
        self.engine.queue.compact()
        heap.trim()
        # what the phase made and kept (its kernels, loaded on first use) lives on too
        heap.freeze_survivors()
        tables = self.engine.take_logs()
        self._stash = []
        out = []
        for name in sorted(tables):
            tbl = tables.pop(name)     # each table's memory goes once it is written
            if self.handoff:
                tbl = with_topo(tbl, self.topo_index)
                self._stash.append(ipc_bytes(tbl))
                schema = tbl.schema
            else:
                if self.storage is not None:
                    self.storage.write_parquet(tbl, name, self.topo_index,
                                               f"{phase_stem}-shard{self.engine.shard_id}")
                schema = tbl.schema.append(TOPO_FIELD)   # (the files' topo is their directory)
            out.append((name, schema, tbl.num_rows))
        return out

    def take_tables(self):
        """The tables of the last `flush` as Arrow IPC streams (one return value each, so
        the driver owns them and they outlive this actor)."""
        stash, self._stash = self._stash, []
        return stash[0] if len(stash) == 1 else tuple(stash)

    def counters(self) -> dict:
        return self.engine.counters()

    def peak_rss_bytes(self) -> int:
        """This shard process's peak resident memory (for benchmarks)."""
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def save(self, name: str) -> bytes | None:
        """Checkpoint `name`: the inbox joins the queue first, so nothing in flight is lost.
        Pickled straight into the storage's checkpoints/<name>/shard<k>.pkl (the state is
        never copied whole in memory), or returned pickled for the driver to keep when the
        shard has no storage."""
        self.engine.accept(self._take_inbox())
        state = self.engine.state()
        if self.storage is None:
            return pickle.dumps(state, protocol=5)
        with self.storage.writer("checkpoints", name, f"shard{self.engine.shard_id}.pkl") as f:
            pickle.dump(state, f, protocol=5)
        return None

    def load(self, name: str, data: bytes | None = None) -> int:
        """Restore checkpoint `name` (from the storage, or `data` the driver kept)."""
        if data is None:
            with self.storage.reader("checkpoints", name,
                                     f"shard{self.engine.shard_id}.pkl") as f:
                state = pickle.load(f)
        else:
            state = pickle.loads(data)
        self.engine.load_state(state)
        self._take_inbox()
        with self._cond:   # promises made on another timeline bound nothing here
            self._promise_in[:] = 0
            self._promise_in[self.engine.shard_id] = NEVER
            self._promise_era[:] = -1
            self._era = -1
            self._left_in[:] = -1
            self._promised[:] = -1
            self._promise_now[:] = 0
            self._asked_in[:] = -1
            self._asked_out[:] = -1
            self._aborted = -1
        return self.engine.queue.next_time()
