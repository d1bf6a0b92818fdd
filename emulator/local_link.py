"""Pushes between the shard processes of one machine over Unix domain sockets.

A window's exchange between two shards (emulator/shard_actor.py: a push carries a batch
and a promise) costs one Ray actor call per push when it goes through Ray: the call's
own work in both processes and the wake-up of the receiving actor's thread, a millisecond
or more per window on a loaded machine (docs/ARCHITECTURE.md, "Window synchronisation").
Between shards of one machine a push goes instead as one frame on a stream socket: a
header of eight int64 (kind, sender, push number, era, promise, leaving round, records,
payload ints), the batch's records and its payload as raw bytes; the receiving process
reads it on a thread of its own and applies it as a Ray push is applied
(``ShardActor.deliver``), in push-number order. A SYNC frame asks the receiver to answer
once every frame before it is applied: what the end of a round waits for, where a Ray push
waits for its call to return.

On Linux the sockets live in the abstract namespace (nothing on disk to clean up); other
systems have none, and a server's socket is a file in the temporary directory, removed
when the server closes or its process exits. A server's name is random, and a process
that dies closes its sockets, which its peers' sends and reads then report.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
import tempfile
import threading
import uuid

import numpy as np

from .batch import Batch

PUSH, SYNC = 0, 1
HEADER = 8                   # int64 fields of a frame's header
HEADER_BYTES = 8 * HEADER
SYNCED = b"\x01"             # a receiver's answer to SYNC


class LinkClosed(ConnectionError):
    """The peer's end of a link closed: its process died or the run is shutting down."""


def _read_exact(sock: socket.socket, n: int) -> bytearray:
    """``n`` bytes from ``sock``; LinkClosed if it ends first."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise LinkClosed("the peer closed the link")
        got += k
    return buf


class LinkServer:
    """This shard's end for the pushes of its machine's peers: accepts their links and
    applies each frame with ``apply(src, seq, era, promise, batch, leaving)`` on a reader
    thread per link (batches of ``dtype`` records). ``closed(src, error)`` is called when
    a link ends: ``error`` None when the peer's end closed (its process died, or
    shutdown), else what ``apply`` raised (the link is then dropped)."""

    def __init__(self, apply, closed, dtype: np.dtype,
                 abstract: bool = sys.platform.startswith("linux")):
        self.apply = apply
        self.closed = closed
        self.dtype = np.dtype(dtype)
        name = f"scribe-emu-link-{uuid.uuid4().hex[:16]}"
        self._path = None if abstract else os.path.join(tempfile.gettempdir(), name)
        self.address = f"\0{name}" if abstract else self._path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.address)
        if self._path is not None:
            atexit.register(self._remove_path)
        self._sock.listen(64)
        threading.Thread(target=self._accept, daemon=True, name="link-accept").start()

    def _remove_path(self) -> None:
        if self._path is not None and os.path.exists(self._path):
            os.unlink(self._path)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return                       # closed
            threading.Thread(target=self._read, args=(conn,), daemon=True,
                             name="link-read").start()

    def _read(self, conn: socket.socket) -> None:
        src = -1
        error = None
        try:
            while True:
                head = np.frombuffer(_read_exact(conn, HEADER_BYTES), np.int64)
                kind, src = int(head[0]), int(head[1])
                if kind == SYNC:
                    conn.sendall(SYNCED)     # every frame before it is applied
                    continue
                n_msgs, n_pay = int(head[6]), int(head[7])
                batch = None
                if n_msgs >= 0:
                    msgs = np.frombuffer(_read_exact(conn, n_msgs * self.dtype.itemsize),
                                         self.dtype)
                    pay = np.frombuffer(_read_exact(conn, 4 * n_pay), np.int32) if n_pay \
                        else None
                    batch = Batch(msgs, pay)
                self.apply(src, int(head[2]), int(head[3]), int(head[4]), batch,
                           int(head[5]))
        except (LinkClosed, OSError):
            pass
        except Exception as e:  # noqa: BLE001 - the shard raises it where it waits
            error = e
        finally:
            conn.close()
            self.closed(src, error)

    def close(self) -> None:
        self._sock.close()
        self._remove_path()


class LinkClient:
    """This shard's link to one peer of its machine: :meth:`push` sends a frame,
    :meth:`sync` returns once the peer applied every frame sent before it. Safe to call
    from several threads (a lock per link); never called with the shard's own lock held,
    so a send that waits for the peer to read can always finish (the peer's reader takes
    that peer's lock only to apply a frame it has read whole)."""

    def __init__(self, address: str, src: int):
        self.src = int(src)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(address)
        self._lock = threading.Lock()
        self._unsynced = False

    def push(self, seq, era, promise, batch, leaving, src=None) -> None:
        """Send a push of this link's shard, or (``src``) one this shard passes on for
        shard ``src`` of another machine."""
        src = self.src if src is None else int(src)
        if batch is None:
            head = np.array([PUSH, src, seq, era, promise, leaving, -1, 0], np.int64)
            parts = [head]
        else:
            pay = batch.payload if batch.has_payload else None
            head = np.array([PUSH, src, seq, era, promise, leaving, len(batch.msgs),
                             0 if pay is None else len(pay)], np.int64)
            parts = [head, np.ascontiguousarray(batch.msgs)]
            if pay is not None:
                parts.append(np.ascontiguousarray(pay, np.int32))
        with self._lock:
            try:
                for part in parts:
                    self._sock.sendall(part.view(np.uint8))
            except OSError as e:
                raise LinkClosed(f"the link to a peer shard failed: {e}") from None
            self._unsynced = True

    def sync(self) -> None:
        """Wait until the peer applied every frame pushed so far (nothing if none since
        the last sync)."""
        with self._lock:
            if not self._unsynced:
                return
            head = np.array([SYNC, self.src, 0, 0, 0, 0, 0, 0], np.int64)
            try:
                self._sock.sendall(head.view(np.uint8))
                _read_exact(self._sock, len(SYNCED))
            except OSError as e:
                raise LinkClosed(f"the link to a peer shard failed: {e}") from None
            self._unsynced = False

    def close(self) -> None:
        self._sock.close()
