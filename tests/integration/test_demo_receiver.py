"""The demo's webhook receiver (``make run``): every body a job may send is verified and
logged, forged ones refused; none drops the connection (it did on any body but the
envelope: a topic endpoint with ``format: payload``, a callback's event)."""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from polling.management.demo_receiver import serve
from scheduling.jobs.services import job_schedule_many
from tests.support.factories import job_spec

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def receiver() -> Iterator[str]:
    server = serve("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hooks/demo"
    server.shutdown()
    server.server_close()


def post(url: str, body: str, job_id: str, secret: str | None) -> int:
    now = datetime.now(UTC)
    headers = {"webhook-id": job_id, "webhook-timestamp": str(int(now.timestamp()))}
    if secret is not None:
        headers["webhook-signature"] = Webhook(secret).sign(job_id, now, body)
    request = urllib.request.Request(url, data=body.encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_every_body_a_job_may_send_is_verified_and_logged(team, receiver, caplog) -> None:
    [(job, _)] = job_schedule_many(team=team, specs=[job_spec(payload={"order": 42})])
    job_id, secret = str(job.id), team.signing_secret
    envelope = json.dumps(
        {"id": job_id, "attempt": 1, "due_at": job.due_at.isoformat(), "payload": {"order": 42}}
    )
    caplog.set_level(logging.INFO, logger="sendlater.demo_receiver")
    assert post(receiver, envelope, job_id, secret) == 200
    assert post(receiver, '{"order": 42}', job_id, secret) == 200  # format "payload"
    assert post(receiver, "plain text", job_id, secret) == 200  # a text payload as it is
    looks_like = '{"id": 1, "attempt": 1, "due_at": "soon", "payload": 2}'
    assert post(receiver, looks_like, job_id, secret) == 200  # a payload, not the envelope
    lines = [r.getMessage() for r in caplog.records if "delivered" in r.getMessage()]
    assert len(lines) == 4, lines
    assert f"job={job_id} attempt=1" in lines[0] and 'payload={"order": 42}' in lines[0]
    assert f'webhook-id={job_id} signature=valid body={{"order": 42}}' in lines[1]
    assert lines[2].endswith("body=plain text") and "late=nans" in lines[3]


def test_forged_unknown_and_malformed_ids_are_refused(team, receiver) -> None:
    [(job, _)] = job_schedule_many(team=team, specs=[job_spec()])
    assert post(receiver, "{}", str(job.id), "whsec_" + "A" * 32) == 401  # another secret
    assert post(receiver, "{}", str(job.id), None) == 401  # unsigned
    assert post(receiver, "{}", str(uuid.uuid4()), team.signing_secret) == 401  # no such job
    assert post(receiver, "{}", "not-a-uuid", team.signing_secret) == 401
