"""The fault suite's webhook receiver: records every delivery, misbehaves on demand.

Each request is kept as a ``Receipt`` (webhook-id, attempt, receive time, the
status it was answered with) in the receiver's own table, an in-memory list of
the test process: the service's database is never asked what it delivered.
``mode`` says how the next requests are answered: ``ok``, ``500``, ``429``
(with Retry-After), ``hang`` (sleep past the poller's read timeout, then 200);
``down()`` closes the port and ``up()`` opens it again. Paths ending in
``/always500`` fail whatever the mode (jobs that must end dead).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler

from polling.common.http_server import ReceiverServer


@dataclass(frozen=True, slots=True)
class Receipt:
    webhook_id: str
    job_id: str
    attempt: int
    at: float  # unix seconds, this machine's clock (the database's too: same host)
    status: int
    timestamp_header: int  # webhook-timestamp as sent (the database clock, via the poller)
    due_at: float  # the due time this attempt was claimed for (a retry's is later)


@dataclass
class FaultReceiver:
    port: int
    mode: str = "ok"
    retry_after_seconds: int = 2
    hang_seconds: float = 2.0
    latency_seconds: float = 0.005  # every answer takes this long: batches stay in flight
    receipts: list[Receipt] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ReceiverServer | None = None

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def up(self) -> None:
        server = _Server(("127.0.0.1", self.port), _handler(self))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._server = server

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def snapshot(self) -> list[Receipt]:
        with self.lock:
            return list(self.receipts)

    def _answer_for(self, path: str) -> tuple[int, dict[str, str], float]:
        if path.endswith("/always500"):
            return 500, {}, 0.0
        mode = self.mode
        if mode == "500":
            return 500, {}, 0.0
        if mode == "429":
            return 429, {"Retry-After": str(self.retry_after_seconds)}, 0.0
        if mode == "hang":
            return 200, {}, self.hang_seconds
        return 200, {}, 0.0


def _unix(value: str | None) -> float:
    return datetime.fromisoformat(value).timestamp() if value else 0.0


class _Server(ReceiverServer):
    allow_reuse_address = True

    def handle_error(self, request: object, client_address: object) -> None:
        """Print nothing: senders that time out hang up on purpose."""


def _handler(receiver: FaultReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            """Print nothing: every request is kept in the receiver's table instead."""

        def do_POST(self) -> None:
            at = time.time()
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            status, headers, delay = receiver._answer_for(self.path)
            doc = json.loads(body or b"{}")
            receipt = Receipt(
                webhook_id=self.headers.get("webhook-id", ""),
                job_id=str(doc.get("id", "")),
                attempt=int(doc.get("attempt", 0)),
                at=at,
                status=status,
                timestamp_header=int(self.headers.get("webhook-timestamp", "0")),
                due_at=_unix(doc.get("due_at")),
            )
            with receiver.lock:
                receiver.receipts.append(receipt)
            time.sleep(delay or receiver.latency_seconds)
            payload = b"ok" if status < 300 else b"nope"
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler
