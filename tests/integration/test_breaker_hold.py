"""A host's open circuit breaker holds its jobs in the window: no write, no attempt.

The transport refuses a job without a request while the host's breaker is open; the
poller parks it again at the head of its lane and leaves the host out of its reads
until the cool-down ends, then sends one job (the breaker's trial) at a time until an
answer closes the breaker (``polling.flow.host_lanes``).
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from polling import metrics
from polling.dispatch.base import Outcome
from polling.dispatch.hostguard import HostGuard, HostOpen
from polling.dispatch.hosts import origin_patterns
from polling.dispatch.router import Router
from polling.dispatch.webhook import WebhookSink
from polling.flow.host_lanes import HostLanes
from scheduling.jobs.services import job_schedule
from scheduling.models import Job
from scheduling.sharding.clock import db_now
from tests.integration.test_host_shares import claimed
from tests.support.clock import FakeMonotonic
from tests.support.pollers import future_base, poller_build
from tests.support.receiver import running_receiver

pytestmark = pytest.mark.django_db

URL = "https://flaky.example/h"


def refused(job, seconds: float) -> Outcome:
    return Outcome(
        job.id, "deferred", error="circuit open", retry_after_seconds=seconds, breaker_open=True
    )


def answer(job, status: int) -> Outcome:
    return Outcome(job.id, "delivered" if status < 300 else "retry", status_code=status)


def test_a_refused_job_waits_at_the_head_of_its_lane_and_the_host_is_left_out() -> None:
    clock = FakeMonotonic()
    lanes = HostLanes(owner="a", cap=2, queue_seconds=1.0, window=100, clock=clock)
    jobs = [claimed(URL, n) for n in range(8)]
    lanes.split(jobs)
    lanes.refresh(db_now())
    assert lanes.ready() == jobs[:4]  # share 2, and 2 more before any answer
    # The breaker opened: the transport hands two back untried, for 5 s.
    assert lanes.hold(jobs[0], 5.0) and lanes.hold(jobs[1], 5.0)
    assert lanes.parked == 6 and lanes.excluded() == origin_patterns(["https://flaky.example"])
    lanes.answered(jobs[2], answer(jobs[2], 500))  # sent before it opened: answers still come
    lanes.answered(jobs[3], answer(jobs[3], 500))
    assert lanes.ready() == []  # nothing goes during the cool-down
    clock.now += 5
    assert lanes.ready() == [jobs[0]]  # then one, the breaker's trial, first in order
    assert lanes.ready() == []
    lanes.answered(jobs[0], answer(jobs[0], 500))  # the trial failed: still one at a time
    assert lanes.ready() == [jobs[1]]
    assert lanes.hold(jobs[1], 10.0)  # the breaker opened again, for longer
    clock.now += 9
    assert lanes.ready() == []
    clock.now += 1
    assert lanes.ready() == [jobs[1]]
    lanes.answered(jobs[1], answer(jobs[1], 200))  # the trial went through: open again
    assert lanes.ready() == jobs[4:]  # twice the share (no latency measured yet)
    for job in jobs[4:]:
        lanes.answered(job, answer(job, 200))
        lanes.ready()
    assert lanes.parked == 0 and lanes.excluded() == [] and lanes.freed


def test_a_held_host_with_nothing_parked_is_read_again_after_its_cool_down() -> None:
    clock = FakeMonotonic()
    lanes = HostLanes(owner="a", cap=2, queue_seconds=1.0, window=100, clock=clock)
    [job] = lanes_one(lanes)
    assert lanes.hold(job, 2.0)
    assert lanes.drop_parked() == [job]  # a settling pass hands it back
    assert lanes.excluded()  # the host stays out of the reads during the cool-down
    lanes.ready()
    assert lanes.excluded()
    clock.now += 2
    lanes.ready()
    assert lanes.excluded() == [] and lanes.freed


def lanes_one(lanes: HostLanes) -> list:
    jobs = [claimed(URL, 0)]
    lanes.split(jobs)
    lanes.refresh(db_now())
    return lanes.ready()


class BreakerSink:
    """Refuses the first ``refusals`` jobs as an open breaker would, then delivers."""

    def __init__(self, refusals: int, seconds: float) -> None:
        self.refusals, self.seconds = refusals, seconds
        self.sent: list = []

    def submit(self, jobs, done) -> None:
        for job in jobs:
            if self.refusals > 0:
                self.refusals -= 1
                done(job, refused(job, self.seconds))
            else:
                self.sent.append(job.id)
                done(job, answer(job, 200))

    def close(self) -> None:
        """Nothing to release."""


def _deferrals() -> float:
    return metrics.DELIVERIES.labels(result="deferred")._value.get()


def webhook_jobs(team, url: str, due, n: int) -> list[Job]:
    return [
        job_schedule(team=team, due_at=due, target_kind="webhook", target=url, now=due)[0]
        for _ in range(n)
    ]


def test_jobs_refused_by_an_open_breaker_are_delivered_later_as_their_first_attempt(
    team, settings
) -> None:
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    base = future_base()
    jobs = webhook_jobs(team, "http://127.0.0.1:9/h", base, 6)
    sink = BreakerSink(refusals=3, seconds=0.3)
    deferrals, held = _deferrals(), metrics.BREAKER_HELD._value.get()
    poller = poller_build(sink=sink)
    now = base + timedelta(seconds=1)
    poller.iterate(now=now, settle=False)
    poller.pump.pump()
    assert metrics.BREAKER_HELD._value.get() - held >= 1
    # Held in the window: the rows untouched, the host out of the reads.
    assert poller.pipeline.hosts.excluded()
    rows = Job.objects.filter(id__in=[j.id for j in jobs])
    assert {(r.status, r.attempts, r.last_error) for r in rows} == {("pending", 0, "")}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(sink.sent) < len(jobs):
        poller.iterate(now=now, settle=False)
        poller.pump.pump(wait=0.05)
    poller.pump.settle()
    assert metrics.BREAKER_HELD._value.get() - held == 3
    rows = Job.objects.filter(id__in=[j.id for j in jobs])
    assert {(r.status, r.attempts) for r in rows} == {("delivered", 1)}
    assert sorted(sink.sent) == sorted(j.id for j in jobs)  # each sent once
    assert _deferrals() == deferrals  # nothing was written back as deferred


def test_a_settling_pass_hands_held_jobs_back_unwritten(team, settings) -> None:
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    base = future_base()
    jobs = webhook_jobs(team, "http://127.0.0.1:9/h", base, 3)
    poller = poller_build(sink=BreakerSink(refusals=3, seconds=60))
    started = time.monotonic()
    poller.iterate(now=base + timedelta(seconds=1))  # settles: no wait for the cool-down
    assert time.monotonic() - started < 30
    assert poller.pipeline.in_flight == 0
    rows = Job.objects.filter(id__in=[j.id for j in jobs])
    assert {(r.status, r.attempts, r.last_error) for r in rows} == {("pending", 0, "")}


def test_a_failing_path_that_trips_the_breaker_costs_a_healthy_path_no_attempts(
    team, settings
) -> None:
    """The fault suite's case: an always-failing path on a host keeps opening its
    breaker; the host's healthy paths' jobs wait out the cool-downs and go on their
    first try."""
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    base = future_base()
    guard = HostGuard(max_per_host=2, failure_threshold=2, cooldown=1.0, max_cooldown=2.0)
    with running_receiver() as rx:
        failing = webhook_jobs(team, rx.url("/fail"), base, 2)
        healthy = webhook_jobs(team, rx.url("/ok"), base + timedelta(seconds=2), 4)
        poller = poller_build(sink=Router({"webhook": WebhookSink(guard=guard)}))
        poller.iterate(now=base + timedelta(seconds=1), settle=False)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and rx.paths().count("/fail") < 2:
            poller.pump.pump(wait=0.05)
        # Two 500s in a row: the transport's breaker for the host is open for 1 s.
        ids = [j.id for j in healthy]
        while time.monotonic() < deadline and set(
            Job.objects.filter(id__in=ids).values_list("status", flat=True)
        ) != {"delivered"}:
            poller.iterate(now=base + timedelta(seconds=3), settle=False)
            poller.pump.pump(wait=0.05)
        poller.pump.settle()
        poller.sink.close()
    rows = Job.objects.filter(id__in=ids)
    assert {(r.status, r.attempts) for r in rows} == {("delivered", 1)}
    assert rx.paths().count("/ok") == 4
    # The failing path's refusals were predicted failures: they count as its attempts.
    rows = Job.objects.filter(id__in=[j.id for j in failing])
    assert sum(r.attempts for r in rows) >= rx.paths().count("/fail") >= 2


def test_the_breaker_names_the_paths_failing_since_the_last_success() -> None:
    clock = FakeMonotonic()
    guard = HostGuard(
        max_per_host=2, failure_threshold=2, cooldown=1.0, max_cooldown=2.0, clock=clock
    )
    guard.record("h:80", ok=False, path="/a")
    guard.record("h:80", ok=True)  # a success forgets what failed before it
    guard.record("h:80", ok=False, path="/b")
    guard.record("h:80", ok=False, path="/c")
    with pytest.raises(HostOpen) as refused_by:
        guard.admit("h:80")
    assert refused_by.value.paths == {"/b", "/c"} and refused_by.value.retry_after == 1.0
    clock.now += 1
    assert guard.admit("h:80")  # the half-open trial
    guard.record("h:80", ok=False, trial=True, path="/c")  # it failed: /c is what fails now
    with pytest.raises(HostOpen) as refused_by:
        guard.admit("h:80")
    assert refused_by.value.paths == {"/c"} and refused_by.value.retry_after == 2.0
