"""What a job sends (issue 31), through the poller to a real receiver: each method and
body format with its headers, the signature on whatever body is sent, the job's
timeout, a schedule's occurrences carrying the request, and key rotation."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from standardwebhooks.webhooks import Webhook

from polling.dispatch.router import Router
from polling.dispatch.webhook import WebhookSink
from scheduling import sealing
from scheduling.jobs.requests import DeliveryRequest, headers_unsealed
from scheduling.jobs.services import job_schedule
from scheduling.models import Job
from scheduling.schedules.services import ScheduleSpec, schedule_create
from tests.support.pollers import future_base, poller_build
from tests.support.receiver import running_receiver

pytestmark = pytest.mark.django_db

TOKEN = "Bearer a-secret-for-the-receiver"


@pytest.fixture(autouse=True)
def _allow_loopback(settings):
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    settings.SENDLATER_BREAKER_FAILURES = 1000


def schedule_job(team, url, due, payload, request):
    job, _ = job_schedule(
        team=team,
        due_at=due,
        target_kind="webhook",
        target=url,
        payload=payload,
        request=request,
        now=due,
    )
    return job


def verified(team, received) -> None:
    """The Standard Webhooks signature holds over the body as received (any body: the
    library's ``verify`` also decodes it as JSON, so the signature is compared here)."""
    headers = received.headers
    at = datetime.fromtimestamp(int(headers["webhook-timestamp"]), tz=UTC)
    expected = Webhook(team.signing_secret).sign(headers["webhook-id"], at, received.body)
    assert expected in headers["webhook-signature"].split(" ")


CASES = [
    # method, format, payload, content_type, expected body, expected content type
    ("POST", "payload", {"a": 1}, None, '{"a":1}', "application/json"),
    ("PUT", "payload", "a=1&b=2", "application/x-www-form-urlencoded", "a=1&b=2", None),
    ("PATCH", "envelope", {"k": "v"}, None, None, "application/json"),
    ("PATCH", "payload", "plain words", None, "plain words", "text/plain; charset=utf-8"),
    ("DELETE", "envelope", {"k": "v"}, None, "", None),
    ("GET", "payload", {"k": "v"}, None, "", None),
]


def test_each_method_and_format_reaches_the_receiver_with_its_headers(team, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    base = future_base()
    with running_receiver() as rx:
        sink = Router({"webhook": WebhookSink(concurrency=4)})
        poller = poller_build(sink=sink)
        jobs = []
        for i, (method, fmt, payload, content_type, _body, _ctype) in enumerate(CASES):
            request = DeliveryRequest(
                method=method,
                headers={"Authorization": TOKEN, "X-Case": str(i)},
                format=fmt,
                content_type=content_type,
                timeout_seconds=5,
            )
            jobs.append(
                schedule_job(
                    team, rx.url(f"/ok?case={i}"), base + timedelta(seconds=i), payload, request
                )
            )
        poller.iterate(now=base + timedelta(seconds=30))
        sink.close()
    by_case = {r.headers["x-case"]: r for r in rx.requests}
    assert len(by_case) == len(CASES)
    for i, (method, _fmt, _payload, content_type, body, ctype) in enumerate(CASES):
        received = by_case[str(i)]
        assert received.method == method, i
        assert received.headers["authorization"] == TOKEN
        assert received.headers["webhook-id"] == str(jobs[i].id)
        assert received.headers["user-agent"].startswith("sendlater-webhook/")
        if body is None:  # the envelope
            assert json.loads(received.body)["payload"] == {"k": "v"}
        else:
            assert received.body == body, i
        expected_type = ctype or content_type
        if expected_type is not None:
            assert received.headers["content-type"] == expected_type, i
        elif method in ("GET", "DELETE"):
            assert "content-type" not in received.headers, i
        verified(team, received)
    assert set(
        Job.objects.filter(id__in=[j.id for j in jobs]).values_list("status", flat=True)
    ) == {"delivered"}


def test_a_default_job_is_sent_as_ever(team) -> None:
    base = future_base()
    with running_receiver() as rx:
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        job = schedule_job(team, rx.url("/ok"), base, {"k": 1}, None)
        assert job.request is None
        poller.iterate(now=base + timedelta(seconds=5))
        sink.close()
    (received,) = rx.requests
    assert received.method == "POST"
    assert received.headers["content-type"] == "application/json"
    assert json.loads(received.body)["payload"] == {"k": 1}
    verified(team, received)


def test_the_jobs_own_timeout_cuts_a_slow_receiver(team) -> None:
    base = future_base()
    with running_receiver() as rx:
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        quick = schedule_job(team, rx.url("/slow/3"), base, {}, DeliveryRequest(timeout_seconds=1))
        poller.iterate(now=base + timedelta(seconds=5))
        sink.close()
    quick.refresh_from_db()
    assert quick.status == "pending" and quick.attempts == 1
    assert "timeout" in quick.last_error


def test_a_schedules_occurrences_carry_its_request(team, settings) -> None:
    settings.SENDLATER_SCHEDULE_AHEAD_SECONDS = 120
    base = future_base()
    with running_receiver() as rx:
        spec = ScheduleSpec(
            target_kind="webhook",
            target=rx.url("/ok"),
            every_seconds=60,
            start_at=base,
            request=DeliveryRequest(method="PUT", headers={"Authorization": TOKEN}),
        )
        schedule = schedule_create(team=team, spec=spec, now=base - timedelta(minutes=5))
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        poller.iterate(now=base)  # materializes, and delivers the first
        poller.iterate(now=base + timedelta(seconds=2))
        sink.close()
    occurrences = Job.objects.filter(schedule_id=schedule.id)
    assert occurrences.exists()
    assert all(headers_unsealed(j.request) == {"Authorization": TOKEN} for j in occurrences)
    assert rx.requests and all(r.method == "PUT" for r in rx.requests)
    assert all(r.headers["authorization"] == TOKEN for r in rx.requests)


def test_key_rotation_reencrypts_and_the_old_key_can_go(team, settings) -> None:
    old, new = settings.SENDLATER_ENCRYPTION_KEYS[0], sealing.key_generate()
    base = future_base()
    job = schedule_job(
        team, "http://127.0.0.1:9/x", base, {}, DeliveryRequest(headers={"X-Key": "v1"})
    )
    token = job.request["headers_sealed"]
    settings.SENDLATER_ENCRYPTION_KEYS = [new, old]  # the new key first: it seals from now on
    call_command("reencrypt_headers", verbosity=0)
    job.refresh_from_db()
    assert job.request["headers_sealed"] != token
    settings.SENDLATER_ENCRYPTION_KEYS = [new]  # the old key dropped: still readable
    assert headers_unsealed(job.request) == {"X-Key": "v1"}


def test_a_token_opened_once_is_not_opened_by_a_key_since_dropped(team, settings) -> None:
    from cryptography.fernet import InvalidToken

    new = sealing.key_generate()
    job = schedule_job(
        team, "http://127.0.0.1:9/x", future_base(), {}, DeliveryRequest(headers={"X-Key": "v1"})
    )
    assert headers_unsealed(job.request) == {"X-Key": "v1"}  # opened (and kept) under old
    opened = headers_unsealed(job.request)
    opened["X-Key"] = "changed"  # the caller's copy: what is kept stays as it was
    assert headers_unsealed(job.request) == {"X-Key": "v1"}
    settings.SENDLATER_ENCRYPTION_KEYS = [new]  # old dropped before re-encryption
    with pytest.raises(InvalidToken):
        headers_unsealed(job.request)
