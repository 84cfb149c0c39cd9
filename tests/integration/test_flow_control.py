"""Flow control in one poller, time controlled by explicit ``now`` (both databases)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db.models import Sum

from polling.dispatch.base import Outcome
from scheduling.flow.models import FlowSlot
from scheduling.flow.services import flow_limits_delete, flow_limits_set, flow_pause_set
from scheduling.jobs.services import job_schedule_many
from scheduling.models import Job
from scheduling.sharding.clock import db_now
from tests.support.factories import job_spec, team_create
from tests.support.pollers import RecordingSink, future_base, poller_build

pytestmark = pytest.mark.django_db


class TimedSink(RecordingSink):
    """Records when each job was handed over (monotonic) and the key's slots in use."""

    def __init__(self) -> None:
        super().__init__()
        self.sent_at: dict = {}
        self.slots_seen: list[int] = []

    def deliver(self, jobs):
        now = time.monotonic()
        for job in jobs:
            self.sent_at[job.id] = now
        self.slots_seen.append(
            FlowSlot.objects.filter(expires_at__gt=db_now() - timedelta(days=9)).aggregate(
                n=Sum("slots")
            )["n"]
            or 0
        )
        return super().deliver(jobs)


def _jobs(team, due, count, *, key=None, step=timedelta(milliseconds=10)):
    specs = [job_spec(due_at=due + i * step) for i in range(count)]
    jobs = [job for job, _ in job_schedule_many(team=team, specs=specs, now=due - timedelta(1))]
    if key is not None:
        Job.objects.filter(id__in=[j.id for j in jobs]).update(flow_control_key=key)
    return [j.id for j in jobs]


def _delivered(ids):
    return Job.objects.filter(id__in=ids, status="delivered").count()


def _keyed(sink, ids):
    wanted = set(ids)
    return [job for job in sink.seen if job.id in wanted]


def test_rate_paces_a_key_in_due_order_while_other_jobs_go_at_once(team) -> None:
    base = future_base()
    flow_limits_set(team=team, key="partner", rate=10, period_seconds=1)
    keyed = _jobs(team, base + timedelta(seconds=1), 20, key="partner")
    plain = _jobs(team, base + timedelta(seconds=1), 50)
    sink = TimedSink()
    poller = poller_build(sink=sink)
    now = base + timedelta(seconds=5)
    poller.iterate(now=now)
    assert _delivered(plain) == 50  # the held key does not delay the shards' other jobs
    # The slots within the horizon (1 s) at one every 0.1 s: now, +0.1 ... +1.0, and
    # the horizon moves on with the pass's own time (each read takes its clock anew).
    first = _delivered(keyed)
    assert 11 <= first <= 13
    seen = _keyed(sink, keyed)
    times = [sink.sent_at[job.id] for job in seen]
    assert times[-1] - times[0] >= 0.95  # paced over the second, not sent at once
    pending = Job.objects.filter(id__in=keyed, status="pending")
    assert pending.count() == 20 - first
    assert set(pending.values_list("attempts", flat=True)) == {0}  # waiting is no attempt
    for step in range(1, 4):
        poller.iterate(now=now + timedelta(seconds=1.1 * step))
    assert _delivered(keyed) == 20
    dues = [job.due_at for job in _keyed(sink, keyed)]
    assert dues == sorted(dues)  # due order within the key


def test_parallelism_bounds_slots_in_flight(team) -> None:
    base = future_base()
    flow_limits_set(team=team, key="narrow", rate=None, parallelism=2)
    keyed = _jobs(team, base + timedelta(seconds=1), 7, key="narrow")
    sink = TimedSink()
    poller = poller_build(sink=sink)
    now = base + timedelta(seconds=5)
    passes = 0
    while _delivered(keyed) < 7 and passes < 20:
        poller.iterate(now=now + timedelta(seconds=passes))
        passes += 1
    assert _delivered(keyed) == 7
    assert max(sink.slots_seen) <= 2
    assert passes >= 4  # two at a time
    assert FlowSlot.objects.aggregate(n=Sum("slots"))["n"] == 0  # every slot given back
    dues = [job.due_at for job in _keyed(sink, keyed)]
    assert dues == sorted(dues)


def test_paused_key_waits_expires_and_resumes_in_due_order(team) -> None:
    base = future_base()
    flow_pause_set(team=team, key="hold", paused=True)
    keyed = _jobs(team, base + timedelta(seconds=1), 6, key="hold", step=timedelta(seconds=1))
    expiring = keyed[:2]
    Job.objects.filter(id__in=expiring).update(expires_at=base + timedelta(seconds=9))
    plain = _jobs(team, base + timedelta(seconds=1), 5)
    sink = RecordingSink()
    poller = poller_build(sink=sink)
    now = base + timedelta(seconds=8)
    poller.iterate(now=now)
    assert _delivered(plain) == 5
    assert _delivered(keyed) == 0
    assert Job.objects.filter(id__in=keyed, status="pending", attempts=0).count() == 6
    # Past their expiry while paused: written expired, never sent.
    poller.iterate(now=now + timedelta(seconds=2))
    assert set(Job.objects.filter(id__in=expiring).values_list("status", flat=True)) == {"expired"}
    assert Job.objects.filter(id__in=keyed[2:], status="pending").count() == 4
    flow_pause_set(team=team, key="hold", paused=False)
    for step in range(3, 8):
        poller.iterate(now=now + timedelta(seconds=step))
    assert _delivered(keyed[2:]) == 4
    assert [job.id for job in _keyed(sink, keyed)] == keyed[2:]


def test_keys_belong_to_their_team(team) -> None:
    other = team_create(slug="other")
    base = future_base()
    flow_pause_set(team=team, key="shared-name", paused=True)
    mine = _jobs(team, base + timedelta(seconds=1), 3, key="shared-name")
    theirs = _jobs(other, base + timedelta(seconds=1), 3, key="shared-name")
    poller = poller_build()
    poller.iterate(now=base + timedelta(seconds=5))
    assert _delivered(theirs) == 3
    assert _delivered(mine) == 0


def test_held_key_does_not_hold_later_buckets_and_removed_limits_let_it_go(team) -> None:
    base = future_base()
    flow_pause_set(team=team, key="stuck", paused=True)
    keyed = _jobs(team, base + timedelta(seconds=1), 4, key="stuck")
    later = _jobs(team, base + timedelta(minutes=3), 4)
    poller = poller_build()
    now = base + timedelta(minutes=5)
    poller.iterate(now=now)
    poller.iterate(now=now + timedelta(seconds=1))
    assert _delivered(later) == 4
    assert _delivered(keyed) == 0
    flow_limits_delete(team=team, key="stuck")
    for step in range(2, 5):
        poller.iterate(now=now + timedelta(seconds=step))
    assert _delivered(keyed) == 4


def test_failed_delivery_gives_its_slot_back_and_retries(team) -> None:
    base = future_base()
    flow_limits_set(team=team, key="flaky", rate=None, parallelism=1)
    keyed = _jobs(team, base + timedelta(seconds=1), 2, key="flaky")

    class FailFirst(RecordingSink):
        def deliver(self, jobs):
            self.seen.extend(jobs)
            return [
                Outcome(j.id, "retry" if j.id == keyed[0] and j.attempt == 1 else "delivered")
                for j in jobs
            ]

    poller = poller_build(sink=FailFirst())
    now = base + timedelta(seconds=5)
    for step in range(4):
        poller.iterate(now=now + timedelta(seconds=step))
    assert Job.objects.get(id=keyed[1]).status == "delivered"
    first = Job.objects.get(id=keyed[0])
    assert first.status == "pending" and first.attempts == 1  # a retry, later
    assert FlowSlot.objects.aggregate(n=Sum("slots"))["n"] == 0
