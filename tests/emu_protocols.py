"""Test protocols for the engine: a flooding ping protocol with per-node random fan-out,
periodic timers, and a handler that can be told to crash. They know nothing of Pastry.
"""

from __future__ import annotations

import numpy as np

from emulator.batch import message_dtype

PING = 200
TICK = 201
BOOM = 202
RELAY = 203
TYPE_NAMES = {PING: "test.ping", TICK: "test.tick", BOOM: "test.boom", RELAY: "test.relay"}
# the one column Flood adds to the engine's: how many hops a ping has made
FLOOD_MESSAGE_FIELDS = [("hops", "i2")]
FLOOD_DTYPE = message_dtype(FLOOD_MESSAGE_FIELDS)


class Flood:
    """PING at node x with hop h < max_hops: x sends `fanout` pings to random nodes.

    Every reception is logged with the cell start it was processed in, so tests can check
    causality and exact arrival times. TICK timers re-arm every `period_us` until `stop_us`.
    """

    def __init__(self, fanout=2, max_hops=6, period_us=0, stop_us=0):
        self.fanout, self.max_hops = fanout, max_hops
        self.period_us, self.stop_us = period_us, stop_us

    def setup(self, ctx):
        self.received = np.zeros(len(ctx.nodes), np.int64)
        if self.period_us:
            ctx.timer(ctx.nodes, np.full(len(ctx.nodes), self.period_us), TICK)

    def handle(self, ctx, type_code, batch):
        m = batch.msgs
        if type_code == PING:
            li = ctx.local(m["dst"])
            np.add.at(self.received, li, 1)
            ctx.log("recv", node=m["dst"], src=m["src"], sent=m["sent"], time=m["time"],
                    hops=m["hops"], cell=np.full(len(m), ctx.now), seq=m["seq"])
            go = m[m["hops"] < self.max_hops]
            if len(go):
                src = np.repeat(go["dst"], self.fanout)
                r = ctx.random(src)
                dst = (r * ctx.n_nodes).astype(np.int64)
                ctx.send(src, dst, PING, np.repeat(go["time"], self.fanout),
                         hops=np.repeat(go["hops"] + 1, self.fanout))
        elif type_code == TICK:
            ctx.log("tick", node=m["dst"], time=m["time"], cell=np.full(len(m), ctx.now))
            nxt = m["time"] + self.period_us
            keep = nxt <= self.stop_us
            if keep.any():
                ctx.timer(m["dst"][keep], nxt[keep], TICK)
        elif type_code == RELAY:
            ctx.send(m["dst"], m["hops"].astype(np.int64), PING, m["time"],
                     hops=np.full(len(m), self.max_hops))
        elif type_code == BOOM:
            raise RuntimeError(f"boom at node {int(m['dst'][0])}")
        else:
            raise ValueError(f"unknown type {type_code}")

    def on_fail(self, ctx, li):
        ctx.log("failed", node=ctx.nodes[li], time=np.full(len(li), ctx.now))

    def on_recover(self, ctx, li):
        ctx.log("recovered", node=ctx.nodes[li], time=np.full(len(li), ctx.now))

    def dump(self, ctx, phase):
        ctx.log("received", node=ctx.nodes, count=self.received.copy())
        return int(self.received.sum())

    def checkpoint(self):
        return {"received": self.received.copy()}

    def restore(self, d):
        self.received = d["received"].copy()
