"""One transport process's loop: webhook requests on libcurl's multi interface (pycurl).

Requests come in over a pipe from the poller's process (``polling.dispatch.transport``)
and replies go back in batches. What it guarantees, per request:

- **SSRF at connect time.** libcurl resolves the host; every address it is about to
  connect to goes through ``OPENSOCKETFUNCTION``, which checks it (``netguard``)
  and refuses a blocked one before a socket exists. The check is on the address
  actually connected to, so a DNS answer that changes after scheduling (rebinding)
  cannot reach an internal host. Kept-alive connections were checked when opened.
- **No redirects, no proxies from the environment, http and https only.**
- **Bounded reads.** At most ``MAX_BODY_READ_BYTES`` of a response body are read;
  past that the transfer is cut (the status is kept) and the connection dropped.
- **Timeouts.** Connect ``connect_timeout``; a response silent for ``read_timeout``
  after the request was sent (or since its last byte); ``connect + 3 * read`` in all.
- **Per host:** at most the host's cap of requests at once, started in the order
  they were sent (FIFO); a circuit breaker (``HostGuard``) fails a host's requests
  fast while it is open. The cap is this poller's share of the host's budget for
  the whole service (``polling.flow.host_shares``), sent by the poller's process
  (``{"caps": {host: cap}}``); a host without one gets the guard's ``max_per_host``.
  Nothing is handed back for being busy: the poller sends a host only what it can
  start soon (``polling.flow.host_lanes``) and keeps the rest itself.
"""

from __future__ import annotations

import logging
import select
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from multiprocessing.connection import Connection
from urllib.parse import urlsplit

import certifi
import pycurl

from polling.dispatch.hostguard import HostGuard, HostOpen, answer_fine
from polling.dispatch.hosts import host_key
from polling.dispatch.signing import signature_for
from polling.dispatch.wire import Reply, reply_wire
from scheduling import netguard

logger = logging.getLogger(__name__)

MAX_BODY_READ_BYTES = 64 * 1024
_IDLE_WAIT_SECONDS = 1.0  # nothing running: wake at least this often
_CURL_WAIT_CAP_SECONDS = 0.05  # curl asked for no particular wait while requests run
_REPLY_BATCH = 256  # replies sent to the poller's process in one message at most
# Replies wait up to this long to travel together: each message wakes a thread of the
# poller's process, which then waits for the GIL, so fewer, larger messages.
_REPLY_LINGER_SECONDS = 0.005


@dataclass(slots=True)
class Request:
    token: int
    url: str
    body: bytes
    headers: list[str]
    host: str = ""  # "name:port", the key of the per-host cap and breaker
    hostname: str = ""
    queued: float = 0.0
    reply: Reply = field(default_factory=Reply)
    trial: bool = False  # the breaker's half-open trial
    heard: float = 0.0  # monotonic, when a response byte last arrived (0: none yet)
    chunks: list[bytes] = field(default_factory=list)  # the body read so far
    method: str = "POST"  # as Outgoing
    timeout: float = 0.0  # as Outgoing: also the request's silence limit when set


class _Slot:
    """One handle's callbacks, set on it once; ``request`` is the request it runs."""

    __slots__ = ("allowlist", "request", "size")

    def __init__(self, allowlist: netguard.Allowlist) -> None:
        self.allowlist = allowlist
        self.request: Request | None = None
        self.size = 0

    def take(self, request: Request) -> None:
        self.request, self.size = request, 0

    def on_body(self, chunk: bytes) -> int | None:
        request = self.request
        assert request is not None
        request.heard = time.monotonic()
        self.size += len(chunk)
        request.chunks.append(chunk)
        if self.size > MAX_BODY_READ_BYTES:
            request.reply.kind = "truncated"
            return 0  # cut the transfer: the connection is dropped
        return None

    def open_socket(self, _purpose: int, address: tuple) -> socket.socket | int:
        request = self.request
        assert request is not None
        family, socktype, protocol, sockaddr = address
        ip = netguard.literal_address(sockaddr[0])
        try:
            if ip is None:
                raise netguard.BlockedTarget(f"unexpected address {sockaddr[0]!r}")
            if not self.allowlist.allows_name(request.hostname):
                netguard.check_address(ip, self.allowlist)
        except netguard.BlockedTarget as error:
            request.reply.kind, request.reply.error = "blocked", f"blocked: {error}"
            return pycurl.SOCKET_BAD
        return socket.socket(family, socktype, protocol)


_host_key = lru_cache(maxsize=4096)(host_key)  # the same few URLs, request after request


class CurlLoop:
    """The transport process's loop: requests in from ``conn``, replies out in batches."""

    def __init__(
        self,
        *,
        conn: Connection,
        allowlist: netguard.Allowlist,
        guard: HostGuard,
        connect_timeout: float,
        read_timeout: float,
        max_connections: int,
    ) -> None:
        self.conn = conn
        self.allowlist = allowlist
        self.guard = guard
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_connections = max(1, max_connections)
        self._next_stall_scan = 0.0
        self._freed = False  # a request finished since the last wait (its slot is free)
        self._inbox: deque[Request] = deque()
        self._outbox: list[tuple[int, tuple]] = []  # (token, reply_wire(...))
        self._outbox_since = 0.0  # when the oldest reply not yet sent arrived
        self._waiting: dict[str, deque[Request]] = {}
        self._active: dict[str, int] = {}
        self._running: dict[pycurl.Curl, Request] = {}
        self._slots: dict[pycurl.Curl, _Slot] = {}  # every handle's callbacks
        self._idle_handles: list[pycurl.Curl] = []
        self._caps: dict[str, int] = {}  # per host: this poller's share of its budget
        # Handles last set up for another method or timeout than the default (reset on reuse).
        self._shaped: set[pycurl.Curl] = set()
        self._closing = False
        self._multi = pycurl.CurlMulti()
        self._multi.setopt(pycurl.M_MAX_TOTAL_CONNECTIONS, self.max_connections)
        self._multi.setopt(pycurl.M_MAXCONNECTS, self.max_connections)

    def run(self) -> None:
        while not self._closing:
            try:
                self._receive()
                self._admit_inbox()
                self._start_ready()
                self._perform()
                self._cut_silent()
                self._send_replies()
                self._wait()
            except (EOFError, OSError, BrokenPipeError):
                return  # the poller's process is gone
            except Exception:  # one bad request must not end the process
                logger.exception("webhook transport: loop failed")
                time.sleep(0.1)
        for handle in list(self._running) + self._idle_handles:
            handle.close()
        self._multi.close()

    def _receive(self) -> None:
        while not self._closing and self.conn.poll():
            message = self.conn.recv()
            if message is None:
                self._closing = True
                return
            if isinstance(message, dict):  # {"caps": {host: cap}}: budget shares changed
                self._caps.update(message.get("caps", {}))
                self._freed = True  # a cap may have grown: waiting requests may start
                continue
            now = time.monotonic()
            for token, url, msg_id, body, headers, secrets, seconds, method, timeout in message:
                signature = signature_for(
                    secrets=secrets, msg_id=msg_id, seconds=seconds, body=body
                )
                request = Request(
                    token,
                    url,
                    body,
                    [
                        *headers,
                        f"webhook-id: {msg_id}",
                        f"webhook-timestamp: {seconds}",
                        f"webhook-signature: {signature}",
                    ],
                )
                request.method, request.timeout = method, timeout
                request.host, request.hostname = _host_key(url)
                request.queued = now
                self._inbox.append(request)

    def _send_replies(self) -> None:
        if not self._outbox:
            return
        lingered = time.monotonic() - self._outbox_since >= _REPLY_LINGER_SECONDS
        if not (lingered or len(self._outbox) >= _REPLY_BATCH or not self._running):
            return
        while self._outbox:
            batch, self._outbox = self._outbox[:_REPLY_BATCH], self._outbox[_REPLY_BATCH:]
            self.conn.send(batch)

    def _admit_inbox(self) -> None:
        inbox = self._inbox
        while inbox:
            request = inbox.popleft()
            waiting = self._waiting.get(request.host)
            if waiting is None:
                waiting = self._waiting[request.host] = deque()
            try:
                self.guard.check(request.host)
            except HostOpen as error:
                self._refuse(request, error)
                continue
            waiting.append(request)

    def _refuse(self, request: Request, error: HostOpen) -> None:
        """Answer a request the host's open breaker refused: ``host_open`` (an attempt
        that failed) on a path that has been failing, ``host_held`` (not tried) on
        another: a failing path must not cost the host's healthy ones attempts."""
        failing = urlsplit(request.url).path in error.paths
        kind = "host_open" if failing else "host_held"
        self._answer(request, kind=kind, error=str(error), hint=error.retry_after)

    def _start_ready(self) -> None:
        default_cap, caps = self.guard.max_per_host, self._caps
        for host, waiting in self._waiting.items():
            active = self._active.get(host, 0)
            cap = caps.get(host, default_cap)
            while waiting and active < cap and len(self._running) < self.max_connections:
                request = waiting.popleft()
                try:
                    trial = self.guard.admit(host)
                except HostOpen as error:
                    self._refuse(request, error)
                    continue
                self._start(request, trial)
                active += 1
            self._active[host] = active
        for host in [h for h, w in self._waiting.items() if not w and not self._active.get(h)]:
            del self._waiting[host]

    def _start(self, request: Request, trial: bool) -> None:
        handle = self._idle_handles.pop() if self._idle_handles else self._new_handle()
        request.reply.started = time.monotonic()
        request.trial = trial
        self._slots[handle].take(request)
        handle.setopt(pycurl.URL, request.url)
        if request.method != "POST" or request.timeout:
            self._shape(handle, request)
        else:
            if handle in self._shaped:
                self._unshape(handle)
            handle.setopt(pycurl.POSTFIELDS, request.body)
        handle.setopt(pycurl.HTTPHEADER, request.headers)
        self._running[handle] = request
        self._multi.add_handle(handle)

    def _shape(self, handle: pycurl.Curl, request: Request) -> None:
        """A job's own method and timeout (its delivery contract); GET and DELETE send
        no body."""
        method = request.method
        if method in ("GET", "DELETE"):
            handle.setopt(pycurl.HTTPGET, 1)
        else:
            handle.setopt(pycurl.POST, 1)
            handle.setopt(pycurl.POSTFIELDS, request.body)
        if method in ("POST", "GET"):
            handle.unsetopt(pycurl.CUSTOMREQUEST)
        else:
            handle.setopt(pycurl.CUSTOMREQUEST, method)
        total = request.timeout or self.connect_timeout + 3 * self.read_timeout
        handle.setopt(pycurl.TIMEOUT_MS, max(1, int(total * 1000)))
        self._shaped.add(handle)

    def _unshape(self, handle: pycurl.Curl) -> None:
        """Back to the default request: a POST within the service's timeout."""
        handle.setopt(pycurl.POST, 1)
        handle.unsetopt(pycurl.CUSTOMREQUEST)
        total = self.connect_timeout + 3 * self.read_timeout
        handle.setopt(pycurl.TIMEOUT_MS, max(1, int(total * 1000)))
        self._shaped.discard(handle)

    def _new_handle(self) -> pycurl.Curl:
        handle = pycurl.Curl()
        handle.setopt(pycurl.NOSIGNAL, 1)
        handle.setopt(pycurl.POST, 1)
        handle.setopt(pycurl.FOLLOWLOCATION, 0)
        handle.setopt(pycurl.PROXY, "")  # never a proxy from the environment
        handle.setopt(pycurl.NOPROXY, "*")
        handle.setopt(pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS)
        handle.setopt(pycurl.REDIR_PROTOCOLS, 0)
        handle.setopt(pycurl.TCP_NODELAY, 1)
        handle.setopt(pycurl.CAINFO, certifi.where())
        handle.setopt(pycurl.CONNECTTIMEOUT_MS, max(1, int(self.connect_timeout * 1000)))
        # A response that stalls: under 1 byte/s for read_timeout (whole seconds, >= 1).
        # The whole request: connect + 3 reads (the dispatch stall limit). A silent
        # response is cut after read_timeout by _cut_silent (libcurl's low-speed
        # check averages in the upload and cannot tell silence under ~5 s).
        total = self.connect_timeout + 3 * self.read_timeout
        handle.setopt(pycurl.TIMEOUT_MS, max(1, int(total * 1000)))
        # The callbacks are the handle's for its life; each request it runs is put in
        # its slot (three closures and setopts a request less). No header callback:
        # the two headers kept are read from libcurl when the request ends (_finish).
        slot = self._slots[handle] = _Slot(self.allowlist)
        handle.setopt(pycurl.WRITEFUNCTION, slot.on_body)
        handle.setopt(pycurl.OPENSOCKETFUNCTION, slot.open_socket)
        return handle

    def _perform(self) -> None:
        multi = self._multi
        while True:
            ret, _running = multi.perform()
            if ret != pycurl.E_CALL_MULTI_PERFORM:
                break
        while True:
            queued, ok, failed = multi.info_read()
            for handle in ok:
                self._finish(handle, None, "")
            for handle, code, message in failed:
                self._finish(handle, code, message)
            if not queued:
                break

    def _cut_silent(self) -> None:
        """Time out requests whose response has been silent for ``read_timeout``.

        Silence counts from the last response byte, or, before the first, from when
        the request was sent (libcurl's pre-transfer time: connecting has its own
        timeout). Scanned a few times per read timeout, not on every loop.
        """
        now = time.monotonic()
        if now < self._next_stall_scan or not self._running:
            return
        self._next_stall_scan = now + min(0.1, self.read_timeout / 4)
        quiet_since = now - self.read_timeout
        silent = []
        for handle, request in self._running.items():
            started = request.reply.started
            if request.timeout:  # the job's own limit, for silence too
                if started < now - request.timeout:
                    silent.append(handle)
                continue
            if started >= quiet_since:
                continue  # younger than the read timeout
            heard = request.heard  # the last body byte; before any, the first byte
            if not heard:
                first = handle.getinfo(pycurl.STARTTRANSFER_TIME)
                heard = started + first if first else 0.0
            if heard:
                if heard < quiet_since:
                    silent.append(handle)
                continue
            sent = handle.getinfo(pycurl.PRETRANSFER_TIME)
            if sent and started + sent < quiet_since:
                silent.append(handle)
        for handle in silent:
            request = self._running[handle]
            if request.timeout:
                message = f"no response within the job's timeout_seconds ({request.timeout:g}s)"
            else:
                message = f"no response byte for {self.read_timeout:g}s"
            self._finish(handle, pycurl.E_OPERATION_TIMEDOUT, message)

    def _finish(self, handle: pycurl.Curl, code: int | None, message: str) -> None:
        request = self._running.pop(handle)
        self._multi.remove_handle(handle)
        self._slots[handle].request = None
        reply = request.reply
        reply.finished = time.monotonic()
        status = handle.getinfo(pycurl.RESPONSE_CODE) or None
        if status:
            reply.content_type = (handle.getinfo(pycurl.CONTENT_TYPE) or "")[:200]
            if status in (429, 503):  # Retry-After in seconds (a date: from now); 0: none
                seconds = handle.getinfo(pycurl.RETRY_AFTER)
                reply.retry_after = str(seconds) if seconds > 0 else None
        reply.excerpt = b"".join(request.chunks)[:MAX_BODY_READ_BYTES]
        request.chunks = []
        truncated = reply.kind == "truncated"
        if code is None or (truncated and status):
            reply.status, reply.kind = status, ""
        elif reply.kind != "blocked":
            reply.status = None
            if code == pycurl.E_OPERATION_TIMEDOUT:
                reply.kind, reply.error = "timeout", f"timeout: {message}"
            else:
                reply.kind, reply.error = "network", f"ConnectError: curl {code}: {message}"
        host = request.host
        # A 4xx other than 429 is the job's fault, and a blocked address the guard's:
        # the host itself is fine. 5xx, 429, timeouts and network errors count against it.
        ok = reply.kind == "blocked" or answer_fine(reply.status)
        path = "" if ok else urlsplit(request.url).path
        self.guard.record(host, ok=ok, trial=request.trial, path=path)
        self._active[host] = self._active.get(host, 1) - 1
        self._idle_handles.append(handle)
        self._freed = True
        self._deliver(request)

    def _answer(self, request: Request, *, kind: str, error: str, hint: float | None) -> None:
        reply = request.reply
        reply.kind, reply.error, reply.wait_hint = kind, error, hint
        reply.started = reply.finished = time.monotonic()
        self._deliver(request)

    def _deliver(self, request: Request) -> None:
        if not self._outbox:
            self._outbox_since = time.monotonic()
        self._outbox.append((request.token, reply_wire(request.reply)))

    def _wait(self) -> None:
        freed, self._freed = self._freed, False
        if self._inbox or (freed and self._waiting):
            return  # new requests, or slots freed for waiting ones: start them first
        multi = self._multi
        readable, writable, broken = multi.fdset()
        wait_ms = multi.timeout()
        if self._running:
            timeout = _CURL_WAIT_CAP_SECONDS if wait_ms < 0 else min(wait_ms / 1000, 1.0)
        else:
            timeout = _IDLE_WAIT_SECONDS
        if self._outbox:
            linger = self._outbox_since + _REPLY_LINGER_SECONDS - time.monotonic()
            timeout = min(timeout, max(0.0, linger))
        if timeout > 0:
            select.select([*readable, self.conn.fileno()], writable, broken, timeout)
