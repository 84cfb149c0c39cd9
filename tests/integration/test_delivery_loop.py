"""Webhook delivery through the poller loop: outcomes, backoff, attempts, dead letters."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import time_machine
from standardwebhooks.webhooks import Webhook

from polling.dispatch.router import Router
from polling.dispatch.webhook import WebhookSink
from scheduling import keys
from scheduling.jobs.deadletters import job_requeue
from scheduling.jobs.selectors import delivery_attempt_list
from scheduling.jobs.services import job_schedule
from scheduling.models import DeliveryAttempt, Job
from tests.support.pollers import future_base, poller_build
from tests.support.receiver import running_receiver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _allow_loopback(settings):
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    settings.SENDLATER_RETRY_BASE_SECONDS = 10
    settings.SENDLATER_RETRY_CAP_SECONDS = 3600
    settings.SENDLATER_MAX_ATTEMPTS = 3
    # One receiver serves every path here: its failing paths must not open the
    # host's circuit breaker for the others (test_webhook_sink covers the breaker).
    settings.SENDLATER_BREAKER_FAILURES = 1000


def webhook_job(team, url, due):
    job, _ = job_schedule(
        team=team, due_at=due, target_kind="webhook", target=url, payload={"k": 1}, now=due
    )
    return job


def test_outcomes_backoff_attempts_and_requeue(team, settings) -> None:
    # /fail and /busy fail up to six times against one host: with the default
    # breaker (5 failures) the circuit could open before the requeued delivery.
    settings.SENDLATER_BREAKER_FAILURES = 100
    base = future_base()
    with running_receiver() as rx:
        sink = Router({"webhook": WebhookSink(concurrency=4)})
        poller = poller_build(sink=sink)
        ok = webhook_job(team, rx.url("/ok"), base + timedelta(seconds=1))
        fail = webhook_job(team, rx.url("/fail"), base + timedelta(seconds=2))
        busy = webhook_job(team, rx.url("/busy"), base + timedelta(seconds=3))
        gone = webhook_job(team, rx.url("/gone"), base + timedelta(seconds=4))
        now = base + timedelta(seconds=30)
        started = time.monotonic()
        poller.iterate(now=now)
        # The poller's clock runs on from ``now`` while it delivers: a retry is due
        # its backoff after the write-back, up to the pass's own duration after ``now``.
        took = timedelta(seconds=time.monotonic() - started)

        ok.refresh_from_db(), fail.refresh_from_db(), busy.refresh_from_db(), gone.refresh_from_db()
        assert ok.status == "delivered" and ok.delivered_at is not None
        assert gone.status == "dead" and "410" in gone.last_error
        # A 500 retries with backoff (10 s base, jitter 0.5-1.0) in its new bucket and shard.
        assert fail.status == "pending" and fail.attempts == 1
        assert now + timedelta(seconds=5) <= fail.due_at <= now + timedelta(seconds=10) + took
        assert fail.bucket == keys.bucket_of(fail.due_at, 60)
        assert fail.shard == keys.shard_of(fail.id, 64)
        assert fail.last_error.startswith("HTTP 500")
        # 429 with Retry-After: 7 waits at least 7 s.
        assert busy.status == "pending" and busy.due_at >= now + timedelta(seconds=7)

        # Failed attempts are rows; a delivery is kept on the job and listed with them.
        attempts = {a.job_id: a for a in DeliveryAttempt.objects.all()}
        assert ok.id not in attempts and len(attempts) == 3
        (attempts[ok.id],) = delivery_attempt_list(job=Job.objects.get(id=ok.id))
        assert attempts[ok.id].result == "delivered" and attempts[ok.id].status_code == 200
        assert attempts[fail.id].result == "retry" and attempts[fail.id].status_code == 500
        assert attempts[gone.id].result == "dead" and attempts[gone.id].status_code == 410
        assert all(a.attempt == 1 for a in attempts.values())
        assert all(a.poller == "p1" for a in attempts.values() if a.result != "delivered")
        assert all(a.duration_ms is not None for a in attempts.values())

        # The retried job fails twice more and goes dead after max attempts (3).
        for _ in range(2):
            now = Job.objects.get(id=fail.id).due_at + timedelta(seconds=1)
            poller.iterate(now=now)
        fail.refresh_from_db()
        assert fail.status == "dead" and fail.attempts == 3
        assert "gave up after 3 attempts" in fail.last_error
        assert [a.result for a in DeliveryAttempt.objects.filter(job=fail).order_by("attempt")] == [
            "retry",
            "retry",
            "dead",
        ]

        # Requeue: a new attempt series, due now, delivered again to the same URL.
        requeued = job_requeue(team=team, job_id=gone.id, now=now)
        assert requeued.status == "pending" and requeued.attempts == 0
        Job.objects.filter(id=gone.id).update(target=rx.url("/ok"))
        for step in (1, 2):  # the first pass may only re-take leases after the time jump
            poller.iterate(now=now + timedelta(seconds=step))
        gone.refresh_from_db()
        assert gone.status == "delivered" and gone.attempts == 1
        sink.close()

    # Every request was signed for the team and carried the job id. Its timestamp is
    # the poller's (database) time, which this test set a day ahead: verify there.
    secret = team.signing_secret
    for request in rx.requests:
        with time_machine.travel(int(request.headers["webhook-timestamp"]), tick=False):
            Webhook(secret).verify(request.body, request.headers)
    assert rx.paths().count("/fail") == 3


def test_expired_job_is_not_delivered(team) -> None:
    base = future_base()
    with running_receiver() as rx:
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
        poller.iterate(now=base + timedelta(minutes=5))
        sink.close()
    job.refresh_from_db()
    assert job.status == "expired"
    assert rx.requests == []
    assert DeliveryAttempt.objects.get(job=job).result == "expired"
