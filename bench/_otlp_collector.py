"""A minimal OTLP/HTTP trace collector for the webhook benchmark's ``--traced`` runs."""

from __future__ import annotations

import json


def collector_serve(port: int) -> None:
    """Answer every OTLP/HTTP export 200 and count its spans; GET /stats, /reset."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    counts = {"requests": 0, "spans": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            """Quiet: no line per export request."""

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            request = ExportTraceServiceRequest.FromString(body)
            counts["requests"] += 1
            counts["spans"] += sum(
                len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans
            )
            self._answer(b"")

        def do_GET(self) -> None:
            if self.path.startswith("/reset"):
                counts.update(requests=0, spans=0)
            self._answer(json.dumps(counts).encode())

        def _answer(self, raw: bytes) -> None:
            self.send_response(200)
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
