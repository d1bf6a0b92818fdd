"""Local links (emulator/local_link.py): the pushes between shard processes of one machine.

In one process, a server and a client (over Linux's abstract namespace, and over a socket
file as on systems without it): frames arrive whole and in order (bare promises, batches
with and without payload), a sync returns only after every frame before it was
applied, and either end closing is reported (the reader's callback; a send's LinkClosed).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import numpy as np
import pytest

from emulator.batch import Batch, message_dtype
from emulator.local_link import LinkClient, LinkClosed, LinkServer

DTYPE = message_dtype([("hops", "i2")])


class _Receiver:
    def __init__(self, delay_s=0.0):
        self.applied = []
        self.closed = threading.Event()
        self.delay_s = delay_s

    def apply(self, src, seq, era, promise, batch, leaving):
        time.sleep(self.delay_s)        # a slow receiver: sync must still wait for it
        self.applied.append((src, seq, era, promise, batch, leaving))

    def close(self, src, error):
        self.error = error
        self.closed.set()


def _batch(n, payload):
    m = np.zeros(n, DTYPE)
    m["time"] = np.arange(n) * 10 + 5
    m["src"], m["dst"], m["hops"] = 3, np.arange(n), 7
    if payload:
        m["pay_off"], m["pay_len"] = np.arange(n) * 2, 2
        return Batch(m, np.arange(2 * n, dtype=np.int32) + 100)
    return Batch(m)


@pytest.mark.parametrize("abstract", [True, False], ids=["abstract", "socket_file"])
def test_frames_arrive_whole_in_order_and_sync_waits_for_them(abstract):
    rx = _Receiver(delay_s=0.02)
    server = LinkServer(rx.apply, rx.close, DTYPE, abstract=abstract)
    client = LinkClient(server.address, src=4)
    big = _batch(50_000, payload=True)          # more than a socket buffer holds
    client.push(0, 2, 1_000, None, -1)
    client.push(1, 2, 2_000, _batch(3, payload=False), -1)
    client.push(2, 2, 3_000, big, 9)
    client.sync()
    assert [a[:4] for a in rx.applied] == [(4, 0, 2, 1_000), (4, 1, 2, 2_000), (4, 2, 2, 3_000)]
    assert rx.applied[0][4] is None and rx.applied[2][5] == 9
    small = rx.applied[1][4]
    assert np.array_equal(small.msgs, _batch(3, payload=False).msgs) and not small.has_payload
    got = rx.applied[2][4]
    assert np.array_equal(got.msgs, big.msgs) and np.array_equal(got.payload, big.payload)
    client.sync()                                # nothing pushed since: returns at once
    client.close()
    assert rx.closed.wait(5) and rx.error is None
    server.close()
    # (a socket file, where there is no abstract namespace, goes with its server)
    assert abstract or not os.path.exists(server.address)


def _serve(conn):
    server = LinkServer(lambda *a: None, lambda src, error: None, DTYPE)
    conn.send(server.address)
    time.sleep(60)


def test_a_push_to_a_peer_whose_process_died_raises():
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    peer = ctx.Process(target=_serve, args=(child,), daemon=True)
    peer.start()
    client = LinkClient(parent.recv(), src=0)
    client.push(0, 0, 1, None, -1)
    client.sync()
    peer.kill()
    peer.join(5)
    with pytest.raises(LinkClosed):
        for seq in range(1, 100):      # (the first sends may still fit the socket buffer)
            client.push(seq, 0, 1, _batch(1000, payload=False), -1)
            client.sync()


def test_a_push_the_receiver_cannot_apply_ends_the_link_with_its_error():
    rx = _Receiver()

    def apply(src, seq, era, promise, batch, leaving):
        raise ValueError(f"bad push {seq}")

    server = LinkServer(apply, rx.close, DTYPE)
    client = LinkClient(server.address, src=2)
    client.push(7, 0, 1, None, -1)
    assert rx.closed.wait(5)
    assert isinstance(rx.error, ValueError) and str(rx.error) == "bad push 7"
    server.close()
