"""Outcome callbacks and kept responses (issue 31): a callback is a job of its own,
written with the outcome that causes it, delivered as a signed event."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from polling.dispatch.router import Router
from polling.dispatch.webhook import WebhookSink
from scheduling.jobs.requests import DeliveryRequest, RetryPolicy
from scheduling.jobs.services import job_schedule
from scheduling.jobs.team_defaults import team_defaults_set
from scheduling.models import Job
from tests.integration.test_delivery_request import verified
from tests.support.pollers import future_base, poller_build
from tests.support.receiver import running_receiver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    settings.SENDLATER_BREAKER_FAILURES = 1000


def schedule(team, url, due, **request):
    job, _ = job_schedule(
        team=team,
        due_at=due,
        target_kind="webhook",
        target=url,
        payload={"k": 1},
        metadata={"order": "o-1"},
        request=DeliveryRequest(**request) if request else None,
        now=due,
    )
    return job


def callbacks_of(job) -> list[Job]:
    return list(Job.objects.filter(metadata__callback_of=str(job.id)))


def test_success_and_failure_callbacks_are_jobs_written_with_the_outcome(team) -> None:
    base = future_base()
    with running_receiver() as rx:
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        ok = schedule(team, rx.url("/ok"), base, on_success_url=rx.url("/ok?hook=done"))
        gone = schedule(team, rx.url("/gone"), base, on_failure_url=rx.url("/ok?hook=failed"))
        plain = schedule(team, rx.url("/ok"), base)
        poller.iterate(now=base + timedelta(seconds=1))
        ok.refresh_from_db(), gone.refresh_from_db()
        assert ok.status == "delivered" and gone.status == "dead"
        (done,) = callbacks_of(ok)
        (failed,) = callbacks_of(gone)
        assert callbacks_of(plain) == []
        # The parent names its callback; the callback has none of its own.
        assert ok.request["callbacks"] == {"job.delivered": str(done.id)}
        assert gone.request["callbacks"] == {"job.dead": str(failed.id)}
        assert done.payload["type"] == "job.delivered" and done.payload["job_id"] == str(ok.id)
        assert done.payload["last_response"]["status_code"] == 200
        assert done.payload["last_response"]["body_excerpt"] == "ok"
        assert failed.payload["type"] == "job.dead" and failed.payload["attempts"] == 1
        assert failed.payload["last_response"]["status_code"] == 410
        assert failed.payload["last_response"]["body_excerpt"] == "gone for good"
        assert failed.payload["metadata"] == {"order": "o-1"}
        # The callbacks go out on the next passes: signed POSTs of the event alone.
        for step in range(2, 6):
            poller.iterate(now=base + timedelta(seconds=step))
            if Job.objects.get(id=done.id).status == "delivered":
                break
        sink.close()
    events = {r.path: r for r in rx.requests if "hook=" in r.path}
    assert set(events) == {"/ok?hook=done", "/ok?hook=failed"}
    assert json.loads(events["/ok?hook=done"].body)["type"] == "job.delivered"
    assert events["/ok?hook=done"].headers["webhook-id"] == str(done.id)
    for received in events.values():
        verified(team, received)
    done.refresh_from_db()
    assert done.status == "delivered" and callbacks_of(done) == []


def test_the_teams_default_failure_callback_hears_expiry_and_no_callback_is_called_back(
    team,
) -> None:
    base = future_base()
    with running_receiver() as rx:
        team_defaults_set(team=team, default_on_failure_url=rx.url("/gone"))  # itself dies
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        job, _ = job_schedule(
            team=team,
            due_at=base,
            target_kind="webhook",
            target=rx.url("/ok"),
            expires_after_seconds=60,
            now=base,
        )
        poller.iterate(now=base + timedelta(minutes=5))  # past its expiry
        job.refresh_from_db()
        assert job.status == "expired"
        (expired,) = callbacks_of(job)
        assert expired.payload["type"] == "job.expired"
        assert expired.payload["last_response"] is None
        # The callback's receiver answers 410: the callback dies, and no one is told.
        for step in range(1, 5):
            poller.iterate(now=base + timedelta(minutes=5, seconds=step))
            if Job.objects.get(id=expired.id).status != "pending":
                break
        sink.close()
    expired.refresh_from_db()
    assert expired.status == "dead"
    assert callbacks_of(expired) == []
    assert [r.path for r in rx.requests] == ["/gone"]


def test_a_response_is_kept_only_where_asked(team) -> None:
    base = future_base()
    with running_receiver() as rx:
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        kept = schedule(team, rx.url("/ok"), base, capture_response=True)
        plain = schedule(team, rx.url("/ok"), base, retry=RetryPolicy(max_attempts=3))
        poller.iterate(now=base + timedelta(seconds=1))
        sink.close()
    kept.refresh_from_db(), plain.refresh_from_db()
    assert kept.response["status_code"] == 200 and kept.response["body_excerpt"] == "ok"
    assert kept.response["duration_ms"] is not None
    assert plain.response is None and plain.status == "delivered"
