"""A small webhook receiver for the demo: verifies signatures and logs deliveries.

It looks up the job named by ``webhook-id`` to find its team's signing secrets
(current and, during a rotation, previous), verifies the Standard Webhooks
signature with the ``standardwebhooks`` library, and logs one line per delivery:
for the service's envelope, the job, its attempt and how late it arrived; for any
other body a job may send (its payload alone, a text, a callback's event), the
``webhook-id`` and the body. Forged or stale requests get 401.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from uuid import UUID

from django.db import close_old_connections, connection
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from polling.common.http_server import ReceiverServer
from polling.dispatch.team_secrets import team_signing_secrets
from scheduling.models import Job

logger = logging.getLogger("sendlater.demo_receiver")

_MAX_BODY_BYTES = 1024 * 1024


def verify(body: str, headers: dict[str, str]) -> Any:
    """Return the verified body, decoded when it is JSON (else the text as it is);
    raise WebhookVerificationError when no signing secret of the job's team signed it."""
    job_id = headers.get("webhook-id", "")
    try:
        UUID(job_id)
    except ValueError:
        raise WebhookVerificationError(f"not a job id: {job_id!r}") from None
    team_id = Job.objects.filter(id=job_id).values_list("team_id", flat=True).first()
    if team_id is None:
        raise WebhookVerificationError(f"unknown job {job_id!r}")
    for secret in team_signing_secrets([team_id]).get(team_id, []):
        try:
            Webhook(secret).verify(body, headers, json_parse=False)
        except WebhookVerificationError:
            continue
        try:
            return json.loads(body)
        except ValueError:
            return body  # a text payload sent as it is (format "payload")
    raise WebhookVerificationError("no matching signature")


_ENVELOPE = frozenset({"id", "attempt", "due_at", "payload"})


def delivery_line(data: Any, headers: dict[str, str]) -> str:
    """The log line of one verified delivery."""
    if isinstance(data, dict) and data.keys() >= _ENVELOPE:
        try:
            due = datetime.fromisoformat(str(data["due_at"]).replace("Z", "+00:00"))
            late = (datetime.now(UTC) - due).total_seconds()
        except (TypeError, ValueError):  # a payload that only looks like the envelope
            late = float("nan")
        return (
            f"demo receiver: delivered job={data['id']} attempt={data['attempt']}"
            f" due_at={data['due_at']} late={late:.2f}s signature=valid"
            f" payload={json.dumps(data['payload'])[:200]}"
        )
    body = data if isinstance(data, str) else json.dumps(data)
    return (
        f"demo receiver: delivered webhook-id={headers.get('webhook-id')} signature=valid"
        f" body={body[:200]}"
    )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass  # one line per delivery below is enough

    def do_POST(self) -> None:
        close_old_connections()
        length = int(self.headers.get("content-length") or 0)
        if length > _MAX_BODY_BYTES:
            return self._answer(413, {"error": "body too large"})
        body = self.rfile.read(length).decode("utf-8", "replace")
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            data = verify(body, headers)
        except (WebhookVerificationError, ValueError) as error:
            logger.warning("demo receiver: REJECTED %s: %s", headers.get("webhook-id"), error)
            return self._answer(401, {"error": str(error)})
        finally:
            connection.close()  # this thread's own: the server's threads come and go
        logger.info("%s", delivery_line(data, headers))
        self._answer(200, {"ok": True})

    def _answer(self, status: int, payload: dict) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def serve(host: str, port: int) -> ReceiverServer:
    """Return a started-to-be server bound to ``host:port`` (call serve_forever)."""
    return ReceiverServer((host, port), _Handler)
