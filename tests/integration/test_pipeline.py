"""The dispatch pipeline: a window of deliveries in flight, written back as they complete."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from polling.dispatch.base import Outcome
from polling.dispatch.hostguard import HostGuard
from polling.dispatch.router import Router
from polling.dispatch.webhook import WebhookSink
from scheduling.jobs.inflight import job_in_flight
from scheduling.jobs.services import job_schedule
from scheduling.models import DeliveryAttempt, InFlightBatch, Job
from tests.integration.test_webhook_sink import SECRET, claimed
from tests.support.pollers import future_base, poller_build
from tests.support.receiver import running_receiver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _allow_loopback(settings):
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    settings.SENDLATER_BREAKER_FAILURES = 1000


def webhook_job(team, url, due):
    job, _ = job_schedule(team=team, due_at=due, target_kind="webhook", target=url, now=due)
    return job


def statuses(jobs) -> list[str]:
    return [Job.objects.get(id=job.id).status for job in jobs]


def test_fast_results_are_written_while_a_slow_host_is_still_in_flight(team) -> None:
    """One slow target holds back neither the write-back nor the claims of others."""
    base = future_base()
    with running_receiver() as slow_rx, running_receiver() as fast_rx:
        slow = [webhook_job(team, slow_rx.url("/slow/3"), base) for _ in range(3)]
        fast = [webhook_job(team, fast_rx.url("/ok"), base) for _ in range(6)]
        poller = poller_build(sink=Router({"webhook": WebhookSink()}))
        poller.iterate(now=base + timedelta(seconds=1), settle=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and set(statuses(fast)) != {"delivered"}:
            poller.pump.pump(wait=0.05)
        assert set(statuses(fast)) == {"delivered"}
        assert set(statuses(slow)) == {"pending"}  # still in flight, not holding anyone up
        assert poller.pipeline.in_flight == len(slow)
        assert all(job_in_flight(Job.objects.get(id=job.id)) for job in slow)
        later = webhook_job(team, fast_rx.url("/ok"), base + timedelta(seconds=2))
        poller.iterate(now=base + timedelta(seconds=3), settle=False)  # claims go on meanwhile
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and statuses([later]) != ["delivered"]:
            poller.pump.pump(wait=0.05)
        assert statuses([later]) == ["delivered"]
        poller.pump.settle()
        poller.sink.close()
    assert set(statuses(slow)) == {"delivered"}
    assert poller.pipeline.in_flight == 0


def test_requests_to_one_host_start_in_order_and_within_its_cap() -> None:
    with running_receiver() as rx:
        guard = HostGuard(max_per_host=1, failure_threshold=5, cooldown=10, max_cooldown=60)
        sink = WebhookSink(secrets_for=lambda ids: {i: [SECRET] for i in ids}, guard=guard)
        jobs = [claimed(rx.url(f"/ok?n={n}")) for n in range(8)]
        outcomes = sink.deliver(jobs)
        capped = WebhookSink(
            secrets_for=lambda ids: {i: [SECRET] for i in ids},
            guard=HostGuard(max_per_host=2, failure_threshold=5, cooldown=10, max_cooldown=60),
        )
        with running_receiver() as slow_rx:
            slow = capped.deliver([claimed(slow_rx.url("/slow/0.3")) for _ in range(6)])
        sink.close(), capped.close()
    assert [o.result for o in outcomes] == ["delivered"] * 8
    assert rx.paths() == [f"/ok?n={n}" for n in range(8)]  # in the order sent
    assert {o.result for o in slow} == {"delivered"}
    assert slow_rx.most_active == 2  # never more than the host's cap at once


def test_a_busy_host_keeps_its_jobs_waiting_unwritten_within_its_cap(team, settings) -> None:
    """More jobs than a slow host takes within SENDLATER_WEBHOOK_QUEUE_SECONDS: the rest
    wait in the poller (parked), never rewritten; each job is written once, delivered,
    and the host never has more than its cap at once."""
    settings.SENDLATER_WEBHOOK_MAX_PER_HOST = 1
    settings.SENDLATER_WEBHOOK_QUEUE_SECONDS = 0.5
    base = future_base()
    with running_receiver() as rx:
        jobs = [webhook_job(team, rx.url("/slow/0.3"), base) for _ in range(6)]
        poller = poller_build(sink=Router({"webhook": WebhookSink()}))
        # A busy host's jobs are left out of the reads: later passes take them.
        for _ in range(10):
            poller.iterate(now=base + timedelta(seconds=1))
            if not Job.objects.filter(id__in=[j.id for j in jobs], status="pending").exists():
                break
        poller.sink.close()
    rows = [Job.objects.get(id=job.id) for job in jobs]
    assert [r.status for r in rows] == ["delivered"] * 6
    assert all(r.attempts == 1 and r.due_at == j.due_at for r, j in zip(rows, jobs, strict=True))
    assert len(rx.requests) == 6 and rx.most_active == 1
    assert poller.pipeline.hosts.parked == 0 and poller.pipeline.in_flight == 0


class SilentSink:
    """Takes jobs and never answers (a handler stuck for good)."""

    def submit(self, jobs, done) -> None:
        self.jobs = list(jobs)

    def close(self) -> None:
        """Nothing to release."""


def test_a_delivery_with_no_outcome_is_given_up_as_a_retry(team, settings) -> None:
    settings.SENDLATER_WEBHOOK_CONNECT_TIMEOUT_SECONDS = 0.1
    settings.SENDLATER_WEBHOOK_READ_TIMEOUT_SECONDS = 0.1  # the stall limit: 0.4 s
    base = future_base()
    job = webhook_job(team, "http://127.0.0.1:9/never", base)
    poller = poller_build(sink=SilentSink())
    started = time.monotonic()
    poller.iterate(now=base + timedelta(seconds=1))
    assert time.monotonic() - started < 5
    job.refresh_from_db()
    assert job.status == "pending" and job.attempts == 1
    assert job.last_error.startswith("no outcome within")
    assert poller.pipeline.in_flight == 0


def test_a_job_with_its_own_longer_timeout_is_given_that_long(team, settings, monkeypatch) -> None:
    from polling.engine import pipeline

    settings.SENDLATER_WEBHOOK_CONNECT_TIMEOUT_SECONDS = 0.1
    settings.SENDLATER_WEBHOOK_READ_TIMEOUT_SECONDS = 0.1  # the service's stall limit: 0.4 s
    monkeypatch.setattr(pipeline, "OWN_TIMEOUT_GRACE_SECONDS", 0.0)
    base = future_base()
    job = webhook_job(team, "http://127.0.0.1:9/never", base)
    Job.objects.filter(id=job.id).update(request={"timeout_seconds": 1})
    poller = poller_build(sink=SilentSink())
    started = time.monotonic()
    poller.iterate(now=base + timedelta(seconds=1))
    assert time.monotonic() - started >= 0.9  # not given up at the service's 0.4 s
    job.refresh_from_db()
    assert job.status == "pending" and job.attempts == 1
    assert job.last_error == "no outcome within 1s (delivery stalled)"
    assert poller.pipeline.in_flight == 0


class HeldSink:
    """Answers only when the test says so."""

    def __init__(self) -> None:
        self.held: list = []

    def submit(self, jobs, done) -> None:
        self.held.extend((job, done) for job in jobs)

    def release(self) -> None:
        for job, done in self.held:
            done(job, Outcome(job.id, "delivered", status_code=200))
        self.held = []

    def close(self) -> None:
        """Nothing to release."""


def _one_job_out(team):
    """A job read by a poller whose sink holds its delivery: (job, sink, poller, now)."""
    base = future_base()
    job = webhook_job(team, "http://127.0.0.1:9/x", base)
    sink = HeldSink()
    poller = poller_build(sink=sink)
    now = base + timedelta(seconds=1)
    poller.iterate(now=now, settle=False)
    assert [j.id for j, _ in sink.held] == [job.id]
    return job, sink, poller, now


def test_results_of_a_lease_lost_mid_flight_are_fenced_out(team) -> None:
    from polling.models import ShardLease
    from polling.ownership import leases

    job, sink, poller, now = _one_job_out(team)
    # Another poller takes the shard over (the lease expired meanwhile): a new epoch.
    ShardLease.objects.filter(shard=job.shard).update(expires_at=now - timedelta(seconds=1))
    taken = leases.lease_acquire(
        owner="p2", shards=[job.shard], now=now, until=now + timedelta(minutes=5)
    )
    assert taken
    sink.release()
    poller.pump.settle()
    job.refresh_from_db()
    assert job.status == "pending"  # the late delivery was not written: p2 delivers it
    assert job.attempts == 0 and job.last_attempt_at is None
    assert job.shard not in poller.leases
    assert DeliveryAttempt.objects.filter(job=job).count() == 0
    assert leases.inflight_clear_stale(owner="p2", shards=[job.shard], now=now) == 1
    assert not job_in_flight(job)


def test_a_write_back_failing_between_passes_drops_the_leases_not_the_poller(
    team, monkeypatch
) -> None:
    """The loop waits between passes writing back outcomes as they arrive; when that
    write fails (the database connection was terminated) it is handled like a failed
    pass: the leases go, the process goes on."""
    base = future_base()
    webhook_job(team, "http://127.0.0.1:9/x", base)
    sink = HeldSink()
    poller = poller_build(sink=sink)
    poller.iterate(now=base + timedelta(seconds=1), settle=False)
    assert poller.leases and sink.held

    def broken(now):
        raise RuntimeError("the connection is lost")

    monkeypatch.setattr(poller.pipeline, "write_back", broken)
    sink.release()
    poller._wait(1.0)  # must not raise
    assert poller.leases == {} and poller._failures == 1
    assert poller.pipeline.in_flight == 0


def test_a_late_outcome_of_a_forgotten_read_leaves_the_next_read_in_place(team) -> None:
    """A failure drops the leases and forgets the window while a delivery is still out;
    the job is read again under a new epoch. The first delivery's outcome, arriving
    after that, must not stand in for the second read's: that one is written back
    (the job delivered, its batch gone) and the job is not read a third time."""
    job, sink, poller, now = _one_job_out(team)
    first_epoch = poller.leases[job.shard]
    poller._fail("a terminated connection")  # the leases go, the window is forgotten
    assert poller.pipeline.in_flight == 0 and len(sink.held) == 1  # still out at the sink
    poller.iterate(now=now, settle=False)  # a new epoch reads the job again
    assert poller.leases[job.shard] > first_epoch
    (old, _), (new, _) = sink.held
    assert old.id == new.id == job.id and old.batch != new.batch
    sink.release()  # the forgotten read's outcome first, then the new read's
    poller.pump.settle()
    job.refresh_from_db()
    assert job.status == "delivered" and job.attempts == 1
    assert not InFlightBatch.objects.filter(shard=job.shard).exists()
    assert poller.pipeline.in_flight == 0
    poller.iterate(now=now + timedelta(seconds=1), settle=False)
    assert len(sink.held) == 0  # nothing read again
