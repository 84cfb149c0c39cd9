"""A job's retry policy (issue 31) against a failing receiver: its own, its team's
defaults under it, the service's under both."""

from __future__ import annotations

from datetime import timedelta

import pytest

from polling.dispatch.base import Outcome
from polling.dispatch.router import Router
from polling.dispatch.webhook import WebhookSink
from polling.writing.retries import Policies
from scheduling.jobs.requests import DeliveryRequest, RetryPolicy
from scheduling.jobs.services import job_schedule
from scheduling.jobs.team_defaults import team_defaults_set
from scheduling.models import DeliveryAttempt, Job
from tests.support.pollers import future_base, poller_build
from tests.support.receiver import running_receiver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    settings.SENDLATER_BREAKER_FAILURES = 1000
    settings.SENDLATER_MAX_ATTEMPTS = 10
    settings.SENDLATER_RETRY_BASE_SECONDS = 10
    settings.SENDLATER_RETRY_CAP_SECONDS = 3600


def failing_job(team, url, due, retry=None):
    job, _ = job_schedule(
        team=team,
        due_at=due,
        target_kind="webhook",
        target=url,
        request=DeliveryRequest(retry=retry) if retry else None,
        now=due,
    )
    return job


def run_until_settled(poller, job, now, passes=6):
    for _ in range(passes):
        poller.iterate(now=now)
        job.refresh_from_db()
        if job.status != "pending":
            return job
        now = job.due_at + timedelta(seconds=1)
    return job


def test_max_attempts_two_is_dead_after_exactly_two_tries(team) -> None:
    base = future_base()
    with running_receiver() as rx:
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        job = failing_job(team, rx.url("/fail"), base, RetryPolicy(max_attempts=2))
        job = run_until_settled(poller, job, base + timedelta(seconds=1))
        sink.close()
    assert job.status == "dead" and job.attempts == 2
    assert "gave up after 2 attempts" in job.last_error
    assert rx.paths().count("/fail") == 2
    results = DeliveryAttempt.objects.filter(job=job).order_by("attempt")
    assert [a.result for a in results] == ["retry", "dead"]


def test_the_jobs_backoff_bounds_its_retry(team) -> None:
    base = future_base()
    with running_receiver() as rx:
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        policy = RetryPolicy(max_attempts=5, min_backoff_seconds=300, max_backoff_seconds=400)
        job = failing_job(team, rx.url("/fail"), base, policy)
        now = base + timedelta(seconds=1)
        poller.iterate(now=now)
        sink.close()
    job.refresh_from_db()
    assert job.status == "pending" and job.attempts == 1
    # At least min_backoff (the jitter never takes it under), at most max_backoff.
    assert now + timedelta(seconds=300) <= job.due_at <= now + timedelta(seconds=400 + 30)


def test_team_defaults_apply_under_the_jobs_own(team) -> None:
    team_defaults_set(team=team, retry=RetryPolicy(max_attempts=1))
    base = future_base()
    with running_receiver() as rx:
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        plain = failing_job(team, rx.url("/fail"), base)
        own = failing_job(team, rx.url("/fail"), base, RetryPolicy(max_attempts=3))
        poller.iterate(now=base + timedelta(seconds=1))
        sink.close()
    plain.refresh_from_db(), own.refresh_from_db()
    assert plain.status == "dead" and plain.attempts == 1  # the team's one try
    assert own.status == "pending" and own.attempts == 1  # the job's own three


def test_policies_fall_back_field_by_field(team, settings) -> None:
    team_defaults_set(team=team, retry=RetryPolicy(min_backoff_seconds=60))
    policies = Policies()

    class Job_:
        team_id = team.pk
        request = {"retry": {"max_attempts": 4}}

    policies.read_teams([Job_()])
    policy = policies.of(Job_())  # type: ignore[arg-type]
    assert policy.max_attempts == 4  # the job's
    assert policy.base_seconds == 60 and policy.floor_seconds == 60  # the team's
    assert policy.cap_seconds == 3600  # the service's
    Job_.request = None
    assert policies.of(Job_()).max_attempts == 10  # type: ignore[arg-type]


def test_a_delivered_group_reads_no_team(team, django_assert_num_queries) -> None:
    from polling.writing.retries import results_build

    base = future_base()
    job = failing_job(team, "http://127.0.0.1:9/x", base)
    claimed = _claimed(job)
    with django_assert_num_queries(0):
        results = results_build(
            jobs=[claimed], outcomes=[Outcome(claimed.id, "delivered")], expired=[], now=base
        )
    assert results[0].status == "delivered"
    assert Job.objects.get(id=job.id).status == "pending"


def _claimed(job):
    from polling.dispatch.base import ClaimedJob

    return ClaimedJob(
        id=job.id,
        team_id=job.team_id,
        due_at=job.due_at,
        bucket=job.bucket,
        shard=job.shard,
        attempt=1,
        target_kind=job.target_kind,
        target=job.target,
        payload=job.payload,
        metadata=job.metadata,
        expires_at=None,
    )
