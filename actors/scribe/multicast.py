"""Multicast dissemination (SPEC 3): source -> RP -> down the tree.

A source sends MCAST to the group's RP (routed the first time, then directly once the RP
has told it its address with RP_ADDR); the RP checks the credential and sends one DATA
copy per child, and every tree node does the same; members log a ``delivery``. With the
reliable layer, numbering, buffering and ordered release are ``reliable.OrderedDelivery``'s
and the source/RP side is ``publishing.ReliablePublishing``'s.
"""

from __future__ import annotations

import numpy as np

from . import handler_kernels
from .groups import GroupDirectory
from .publishing import ReliablePublishing
from .reliable import OrderedDelivery
from .tree import TreeState, disseminate_at_slots
from .types import DATA, MCAST, RP_ADDR, Data, Mcast, McastReq, RpAddr
from .wire import Messenger, take_rows

# the ``delivery`` log's columns as fields of the DATA row delivered (``_log_delivery``'s
# columns and types; handler_kernels.on_data returns those rows)
DELIVERY_FROM_DATA = (("group", "group"), ("member", "dst"), ("source", "origin"),
                      ("publish_time", Data.publish_time), ("time", "time"),
                      ("hops", Data.total_hops, np.int16), ("seqno", Data.seqno))


class Dissemination:
    """``ordered``/``publishing``: the reliable layer's parts, both None when it is off.
    ``variant_of()`` gives the label of the delivery rows."""

    def __init__(self, tree: TreeState, groups: GroupDirectory, messenger: Messenger,
                 ordered: OrderedDelivery | None, publishing: ReliablePublishing | None,
                 rp_cache_ttl_us, max_tree_hops: int, variant_of):
        self.tree = tree
        self.groups = groups
        self.messenger = messenger
        self.ordered = ordered
        self.publishing = publishing
        self.rp_cache_ttl_us = rp_cache_ttl_us
        self.max_tree_hops = max_tree_hops
        self.variant_of = variant_of

    def on_mcast_req(self, ctx, m) -> None:
        """A local source publishes: directly to the cached RP, else routed."""
        t = self.tree
        s = t.get_or_make(self.messenger.local(ctx, m["dst"]), m["group"])
        seqno = m[McastReq.seqno]
        if self.publishing is not None:  # reliable: the source numbers and keeps its messages
            seqno = self.publishing.number_at_source(ctx, m, s)
        self.send_mcast(ctx, s, m["dst"], m["time"], m["group"], m[McastReq.credential],
                        seqno, m["time"])

    def send_mcast(self, ctx, s, me, now, group, credential, seqno, publish) -> None:
        """Source slots s (of nodes me) send MCASTs: directly to the RP whose address they
        hold, else (none learned, or not confirmed within ``rp_cache_ttl_us``) routed to
        the group's key. Fresh publishes and the reliable layer's re-sends both go this
        way: while the RP keeps answering (RP_ADDR) it is alive and the root, wherever
        Pastry's routes end (a failed RP that recovered without state is the key's closest
        node again, but not the RP: it refuses what is routed to it)."""
        sl = self.tree.slots
        rp = sl["rp_cache"][s]
        cached = rp >= 0
        ttl = self.rp_cache_ttl_us
        if ttl:  # a cached RP may have failed: rediscover it by routing now and then
            cached &= now - sl["rp_cache_time"][s] <= ttl
        fields = {**Mcast.fields(credential=credential, seqno=seqno, publish_time=publish),
                  "origin": me}
        d = {k: v[cached] for k, v in fields.items()}
        self.messenger.send(ctx, me[cached], rp[cached], MCAST, now[cached], group[cached],
                            **d)
        r = {k: v[~cached] for k, v in fields.items()}
        self.messenger.route(ctx, me[~cached], MCAST, now[~cached], group[~cached], **r)

    def on_mcast_delivered(self, ctx, m) -> None:
        """MCAST routed to the RP."""
        self._mcast_at_rp(ctx, m, routed=True)

    def on_mcast_received(self, ctx, m) -> None:
        """MCAST sent directly to a cached RP address."""
        self._mcast_at_rp(ctx, m, routed=False)

    def _mcast_at_rp(self, ctx, m, routed: bool) -> None:
        t, sl = self.tree, self.tree.slots
        s = t.find(self.messenger.local(ctx, m["dst"]), m["group"])
        is_rp = s >= 0
        is_rp[is_rp] = sl["root"][s[is_rp]] & sl["active"][s[is_rp]]
        if not routed:  # stale cache: this node is not the RP (any more); route on
            lost = ~is_rp
            sub = take_rows(m, lost)
            self.messenger.route(ctx, sub["dst"], MCAST, sub["time"], sub["group"],
                                 **Mcast.fields(credential=sub[Mcast.credential],
                                                seqno=sub[Mcast.seqno],
                                                publish_time=sub[Mcast.publish_time]),
                                 origin=sub["origin"])
            m, s, is_rp = take_rows(m, ~lost), s[~lost], is_rp[~lost]
        bad = ~is_rp | (m[Mcast.credential] != sl["acl"][np.maximum(s, 0)])
        self.groups.refuse(ctx, m["group"][bad], m["origin"][bad], "multicast", m["time"][bad])
        ok = ~bad
        sub, s = take_rows(m, ok), s[ok]
        if self.publishing is not None:  # reliable: each source's messages in source order;
            sub, s = self.publishing.source_fifo(ctx, sub, s)   # acks (RP_ADDR) sent there
        elif routed:  # the source learns the RP's address and sends directly next time
            far = sub["origin"] != sub["dst"]
            self.messenger.send(ctx, sub["dst"][far], sub["origin"][far], RP_ADDR,
                                sub["time"][far], sub["group"][far],
                                **RpAddr.fields(rp=sub["dst"][far]))
        publish = sub[Mcast.publish_time]
        seqno = self.ordered.number_at_root(s) if self.ordered is not None else sub[Mcast.seqno]
        self.disseminate(ctx, s, sub["dst"], sub["group"], sub["origin"], publish, seqno,
                         sub["hops"].astype(np.int64), sub["time"])
        if self.publishing is not None:  # reliable: replicas keep the numbered stream
            self.publishing.replicate_data(ctx, s, sub["origin"], publish, seqno,
                                           sub[Mcast.seqno], sub["time"])

    def on_rp_addr(self, ctx, m) -> None:
        """The RP told this source its address (and, reliable layer, acknowledged up to
        the source seqno acked_seq)."""
        t = self.tree
        s = t.get_or_make(self.messenger.local(ctx, m["dst"]), m["group"])
        t.slots["rp_cache"][s] = m[RpAddr.rp]
        t.slots["rp_cache_time"][s] = m["time"]
        if self.publishing is not None:
            self.publishing.acknowledge(self.messenger.local(ctx, m["dst"]), m["group"],
                                        m[RpAddr.acked_seq])

    def disseminate(self, ctx, s, nodes, group, source, publish, seqno, hops, now) -> None:
        """Members among slots s log a delivery; every slot sends one copy per child."""
        if self.ordered is not None:
            self.ordered.disseminate(ctx, s, nodes, group, source, publish, seqno, hops, now)
            return
        mem = disseminate_at_slots(self.tree, self.messenger, ctx, s, nodes, group, source,
                                   publish, seqno, hops, now, numbered=True)
        if len(mem):
            self._log_delivery(ctx, group[mem], nodes[mem], source[mem], publish[mem],
                               now[mem], hops[mem], seqno[mem])

    def _log_delivery(self, ctx, group, member, source, publish, now, hops, seqno) -> None:
        """One ``delivery`` row per member that got a message."""
        ctx.log_owned("delivery", group=group.astype(np.int32), member=member.astype(np.int32),
                      source=source.astype(np.int32), publish_time=publish.astype(np.int64),
                      time=now.astype(np.int64), hops=hops.astype(np.int16),
                      seqno=seqno.astype(np.int64),
                      variant=self.variant_of())

    def on_data(self, ctx, m) -> None:
        """A DATA copy from the parent: pass it on (and deliver it where a member). (Without
        the reliable layer a cell goes through ``data_compiled`` first.)"""
        li = self.messenger.local(ctx, m["dst"])
        s = self.tree.find_active(li, m["group"])
        hit = s >= 0
        ctx.count("scribe_data_no_state", int((~hit).sum()))
        self.tree.heard_from_parent(li, m["group"], m["src"], m["time"])
        # a copy that went round more tree hops than any tree is deep is in a loop
        # (possible only under failures): drop it rather than circulate forever
        looping = hit & (m[Data.total_hops] > self.max_tree_hops)
        ctx.count("scribe_data_hop_limit", int(looping.sum()))
        hit &= ~looping
        sub = take_rows(m, hit)
        self.disseminate(ctx, s[hit], sub["dst"], sub["group"], sub["origin"],
                         sub[Data.publish_time], sub[Data.seqno], sub[Data.total_hops],
                         sub["time"])

    def data_compiled(self, ctx, m) -> bool:
        """A DATA cell without the reliable layer in one compiled pass
        (``handler_kernels.on_data``): as ``on_data``, the copies and the delivery log's
        columns written with the look-ups. False (nothing done) when it declines."""
        t, keys = self.tree, self.groups.table
        sl = t.slots
        res = self.messenger.send_compiled(
            ctx, 4 * len(m), handler_kernels.on_data, m,
            ctx.local(m["dst"]).astype(np.int64),   # (the compiled loop's li type)
            t.slot_index.arrays, t.entry_index.arrays, t.n_groups, self.max_tree_hops,
            sl["active"], sl["parent"], sl["member"], sl["last_heard"], sl["last_seq"],
            sl["last_sent"], t.entries["valid"], t.entries["child"], keys["id_hi"],
            keys["id_lo"], DATA)
        if res[0] != handler_kernels.DONE:
            return False
        self.data_counts(ctx, res[1], res[2])
        if len(res[3]):
            self.log_deliveries(ctx, take_rows(m, res[3]))
        return True

    def mcast_compiled(self, ctx, m) -> bool:
        """MCASTs sent directly to their RP, without the reliable layer, in one compiled
        pass (``handler_kernels.on_mcast``): as ``on_mcast_received``. False (nothing
        done) when it declines (a stale cached address, a refused credential, ...)."""
        t, keys = self.tree, self.groups.table
        sl = t.slots
        res = self.messenger.send_compiled(
            ctx, 4 * len(m), handler_kernels.on_mcast, m,
            ctx.local(m["dst"]).astype(np.int64), np.int64(0), t.slot_index.arrays,
            t.entry_index.arrays, t.n_groups, sl["active"], sl["root"], sl["acl"],
            sl["member"], sl["last_seq"], sl["last_sent"], t.entries["valid"],
            t.entries["child"], keys["id_hi"], keys["id_lo"], MCAST, DATA, RP_ADDR)
        if res[0] != handler_kernels.DONE:
            return False
        if len(res[1]):
            self.log_deliveries(ctx, res[1])
        return True

    def rp_addr_compiled(self, ctx, m) -> bool:
        """RP_ADDRs without the reliable layer in one compiled pass
        (``handler_kernels.on_rp_addr``): as ``on_rp_addr``. False (nothing done) where a
        source has no slot for the group."""
        t, sl = self.tree, self.tree.slots
        return handler_kernels.on_rp_addr(
            m, ctx.local(m["dst"]).astype(np.int64), t.slot_index.arrays, t.n_groups,
            sl["rp_cache"], sl["rp_cache_time"], RP_ADDR) == handler_kernels.DONE

    def data_counts(self, ctx, no_state: int, looping: int) -> None:
        """After ``handler_kernels.on_data`` took DATA rows: its counts."""
        ctx.count("scribe_data_no_state", no_state)
        ctx.count("scribe_data_hop_limit", looping)

    def log_deliveries(self, ctx, records) -> None:
        """A delivery row for each of ``records`` (DATA records: a copy a member got, or
        the one an MCAST delivered at its RP would be)."""
        ctx.log_records("delivery", records, DELIVERY_FROM_DATA,
                        (("variant", self.variant_of()),))
