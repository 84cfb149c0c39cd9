"""The threaded HTTP server the receivers here run on (the demo's, the tests').

``socketserver`` listens with a backlog of 5: pollers opening their connections to a
host at once overflow it, and each dropped handshake costs the client seconds of
retries (past a request timeout on a loaded machine)."""

from __future__ import annotations

from http.server import ThreadingHTTPServer


class ReceiverServer(ThreadingHTTPServer):
    """A ``ThreadingHTTPServer`` with daemon handler threads and a listen backlog of 128."""

    daemon_threads = True
    request_queue_size = 128
