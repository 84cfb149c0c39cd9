"""Webhook HTTP in a transport process of its own, one per webhook sink (poller).

Why libcurl: measured here (docs/performance.md, ``bench/http_clients.py``) it sends
the same signed POSTs at ~60 us of CPU each, against ~230 us for aiohttp and ~900 us
for httpcore on threads; the HTTP parsing, connection reuse, timeouts and TLS run
in C. Why a process: libcurl calls back into Python for every response (headers,
body, the connect check), and each call needs the GIL; next to a poller thread busy
with its database work, every one of them waited for the GIL (a tenth of the
throughput in a thread). The poller's process keeps the database; the transport
process (``TransportProcess``, started with ``spawn``) runs ``curlloop.CurlLoop``:
it signs and sends, and returns replies in batches over a pipe. If it dies, every
request it held is answered as a network error (retried) and the next send starts
a new one.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from polling.dispatch.curlloop import CurlLoop
from polling.dispatch.hostguard import HostGuard
from polling.dispatch.wire import Outgoing, Reply, outgoing_wire, replies_read
from scheduling.storage.gcpause import gc_settle

__all__ = ["Outgoing", "Reply", "TransportProcess"]

logger = logging.getLogger(__name__)


def _transport_main(conn: Connection, config: dict[str, Any]) -> None:
    """The transport process: serve ``conn`` until it closes or says stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the poller, which stops us
    guard = HostGuard(**config.pop("guard"))
    loop = CurlLoop(conn=conn, guard=guard, **config)
    gc_settle()
    loop.run()


class TransportProcess:
    """The poller's side: sends requests to the transport process, reads its replies.

    ``on_replies`` is called on a reader thread with each batch of ``(token,
    Reply)``; tokens of requests the process never answered (it died) are answered
    with a network error.
    """

    def __init__(
        self, *, config: dict[str, Any], on_replies: Callable[[list[tuple[int, Reply]]], None]
    ) -> None:
        self.config = config
        self.on_replies = on_replies
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._process: Any = None
        self._outstanding: set[int] = set()

    def warm(self) -> None:
        """Start the process now (a poller at start), not at the first send: its
        start-up (a second or two) would otherwise hold the first jobs, which then
        go out together, behind their due time and their flow-control slots."""
        with self._lock:
            if self._conn is None:
                self._start()

    def send(self, batch: list[Outgoing]) -> None:
        with self._lock:
            if self._conn is None:
                self._start()
            self._outstanding.update(out.token for out in batch)
            assert self._conn is not None
            self._conn.send(outgoing_wire(batch))

    def caps(self, caps: dict[str, int]) -> None:
        """This poller's share of each host's concurrency (``polling.flow.host_shares``);
        it applies to the requests sent after it."""
        with self._lock:
            if self._conn is None:
                self._start()
            assert self._conn is not None
            self._conn.send({"caps": dict(caps)})

    def close(self) -> None:
        with self._lock:
            conn, process = self._conn, self._process
            self._conn = None
        if conn is None:
            return
        with contextlib.suppress(OSError):  # already gone
            conn.send(None)
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        mine, theirs = context.Pipe(duplex=True)
        self._process = context.Process(
            target=_transport_main,
            args=(theirs, dict(self.config)),
            name="sendlater-webhook-transport",
            daemon=True,
        )
        self._process.start()
        theirs.close()
        self._conn = mine
        threading.Thread(
            target=self._read, args=(mine,), name="webhook-replies", daemon=True
        ).start()

    def _read(self, conn: Connection) -> None:
        try:
            while True:
                batch = replies_read(conn.recv())
                with self._lock:
                    self._outstanding.difference_update(token for token, _ in batch)
                self.on_replies(batch)
        except (EOFError, OSError):
            pass
        with self._lock:
            lost, self._outstanding = self._outstanding, set()
            if self._conn is conn:
                self._conn = None  # the process is gone: the next send starts another
        if lost:
            logger.error("webhook transport process exited with %s requests unanswered", len(lost))
            now = time.monotonic()
            reply = Reply(
                kind="network", error="transport process exited", started=now, finished=now
            )
            self.on_replies([(token, reply) for token in lost])
