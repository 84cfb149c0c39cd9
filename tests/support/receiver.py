"""A local webhook receiver for tests: records every request, answers by path."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from polling.common.http_server import ReceiverServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: str
    at: float
    method: str = "POST"

    def json(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    port: int
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    active: int = 0  # requests being answered right now
    most_active: int = 0  # the most ever answered at once

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def paths(self) -> list[str]:
        with self.lock:
            return [r.path for r in self.requests]


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            body = self.rfile.read(length).decode()
            with receiver.lock:
                receiver.requests.append(
                    Received(
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        time.time(),
                        self.command,
                    )
                )
                receiver.active += 1
                receiver.most_active = max(receiver.most_active, receiver.active)
            try:
                self._respond()
            finally:
                with receiver.lock:
                    receiver.active -= 1

        # Every method a job may send (its delivery contract) is recorded alike.
        do_PUT = do_PATCH = do_DELETE = do_GET = do_POST

        def _respond(self) -> None:
            path = self.path.split("?")[0]
            if path.startswith("/slow"):
                time.sleep(float(path.rsplit("/", 1)[-1]))
                return self._answer(200, b"late ok")
            answers = {
                "/ok": (200, b"ok", {}),
                "/gone": (410, b"gone for good", {}),
                "/busy": (429, b"slow down", {"Retry-After": "7"}),
                "/unavailable": (
                    503,
                    b"maintenance",
                    {"Retry-After": "Wed, 21 Oct 2099 07:28:00 GMT"},
                ),
                "/fail": (500, b"x" * 5000, {}),
                "/bad": (400, b"bad request", {}),
                "/redirect": (302, b"", {"Location": "/ok"}),
                "/typed": (
                    200,
                    b'{"ok":true}',
                    {"Content-Type": "application/json; charset=utf-8"},
                ),
            }
            status, payload, headers = answers.get(path, (404, b"no such path", {}))
            self._answer(status, payload, headers)

        def _answer(
            self, status: int, payload: bytes, headers: dict[str, str] | None = None
        ) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


class _QuietServer(ReceiverServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that time out hang up on purpose; nothing to report


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    receiver = Receiver(port=0)
    server = _QuietServer(("127.0.0.1", 0), _handler(receiver))
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
