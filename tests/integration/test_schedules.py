"""Recurring schedules materialized by the pollers (both databases, injected clocks)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from polling.models import ShardLease
from polling.upkeep.schedules import (
    occurrences_write_fenced,
    plan,
    schedules_due,
    schedules_materialize,
)
from scheduling.models import Job, JobStatus, Schedule, ScheduleOccurrence
from scheduling.schedules.services import (
    ScheduleSpec,
    schedule_create,
    schedule_delete,
    schedule_pause,
    schedule_resume,
    schedule_update,
)
from tests.support.pollers import RecordingSink, future_base, poller_build

pytestmark = pytest.mark.django_db
AHEAD = 120


@pytest.fixture(autouse=True)
def _ahead(settings) -> None:
    settings.SENDLATER_SCHEDULE_AHEAD_SECONDS = AHEAD


def make(team, now, **fields):
    spec = ScheduleSpec(target_kind="handler", target="noop", **fields)
    return schedule_create(team=team, spec=spec, now=now)


def instants(schedule) -> list[datetime]:
    return sorted(
        Job.objects.filter(schedule_id=schedule.id).values_list("scheduled_for", flat=True)
    )


def live_instants(schedule) -> list[datetime]:
    jobs = Job.objects.filter(schedule_id=schedule.id).exclude(status=JobStatus.CANCELED)
    return sorted(jobs.values_list("scheduled_for", flat=True))


def no_doubles() -> None:
    live = Job.objects.filter(schedule_id__isnull=False).exclude(status=JobStatus.CANCELED)
    counts = Counter(live.values_list("schedule_id", "scheduled_for"))
    assert counts and max(counts.values()) == 1, counts.most_common(3)


def test_poller_materializes_ahead_once_and_delivers_with_schedule_fields(team) -> None:
    base = future_base()
    schedule = make(team, base, every_seconds=60, start_at=base, payload={"n": 1})
    sink = RecordingSink()
    poller = poller_build(sink=sink)
    poller.iterate(now=base)
    planned = instants(schedule)
    # At least AHEAD ahead: every instant up to base + 2 * AHEAD, one job each.
    assert planned == [base + timedelta(minutes=m) for m in range(5)]
    poller.iterate(now=base)
    poller.iterate(now=base + timedelta(seconds=1))
    assert instants(schedule) == planned  # a re-run writes nothing
    job = Job.objects.get(schedule_id=schedule.id, scheduled_for=base)
    assert job.payload == {"n": 1} and job.due_at == base
    for second in range(0, 200, 10):
        poller.iterate(now=base + timedelta(seconds=second))
    delivered = [j for j in sink.seen if j.schedule_id == schedule.id]
    assert [j.scheduled_for for j in delivered] == planned[:4]
    assert len(instants(schedule)) >= 7  # and kept ahead as time goes on
    assert ScheduleOccurrence.objects.filter(schedule_id=schedule.id).count() == len(
        instants(schedule)
    )
    no_doubles()


def test_a_stale_planner_and_a_replayed_plan_write_nothing(team) -> None:
    base = future_base()
    start = base + timedelta(minutes=10)  # not planned by the poller's own pass at ``base``
    schedule = make(team, base, every_seconds=30, start_at=start)
    poller = poller_build()
    poller.iterate(now=base)  # leases, valid for the calls below at ``base``
    assert not instants(schedule)
    leases = dict(ShardLease.objects.filter(owner="p1").values_list("shard", "epoch"))
    count = ShardLease.objects.count()

    def due(until):
        return schedules_due(shards=sorted(leases), until=until, limit=10)

    row = due(start)[0]
    assert row[18] == count
    shard = int(row[17]) % count
    p = plan(row, epoch=leases[shard], shard=shard, now=base, until=start + timedelta(minutes=2))
    assert occurrences_write_fenced(owner="p1", plans=[p], now=base) == 5
    # The same plan again (a racing planner that read the same row): the cursor moved.
    assert occurrences_write_fenced(owner="p1", plans=[p], now=base) == 0
    # A stale epoch (the lease changed hands): fenced out even with a fresh cursor.
    Schedule.objects.filter(id=schedule.id).update(next_at=start + timedelta(minutes=10))
    row = due(start + timedelta(minutes=10))[0]
    stale = plan(
        row, epoch=leases[shard] - 1, shard=shard, now=base, until=start + timedelta(hours=1)
    )
    assert occurrences_write_fenced(owner="p1", plans=[stale], now=base) == 0
    # The cursor put back over instants already planned: the ledger refuses them.
    Schedule.objects.filter(id=schedule.id).update(next_at=start)
    row = due(start)[0]
    again = plan(
        row, epoch=leases[shard], shard=shard, now=base, until=start + timedelta(minutes=3)
    )
    assert occurrences_write_fenced(owner="p1", plans=[again], now=base) == 2  # only the new
    assert len(instants(schedule)) == 7
    no_doubles()


def test_materialize_skips_shards_not_owned(team) -> None:
    base = future_base()
    make(team, base, every_seconds=60, start_at=base)
    poller = poller_build()
    poller.iterate(now=base - timedelta(hours=1))
    assert schedules_materialize(owner="p1", leases={}, now=base) == 0
    assert schedules_materialize(owner="someone-else", leases={0: 1}, now=base) == 0
    assert not Job.objects.filter(schedule_id__isnull=False).exists()


def test_pause_cancels_pending_and_resume_skips_the_missed(team) -> None:
    base = future_base()
    schedule = make(team, base, every_seconds=60, start_at=base)
    poller = poller_build()
    poller.iterate(now=base)
    assert len(live_instants(schedule)) == 5
    paused = schedule_pause(team=team, schedule_id=schedule.id, now=base + timedelta(seconds=1))
    assert paused.paused
    # The instant at ``base`` was due: delivered or in flight, it stays; the rest canceled.
    assert Job.objects.filter(schedule_id=schedule.id, status=JobStatus.PENDING).count() == 0
    poller.iterate(now=base + timedelta(minutes=5))
    assert not Job.objects.filter(schedule_id=schedule.id, status=JobStatus.PENDING).exists()
    later = base + timedelta(minutes=10, seconds=30)
    schedule_resume(team=team, schedule_id=schedule.id, now=later)
    poller.iterate(now=later)
    live = live_instants(schedule)
    resumed = [t for t in live if t > base]
    # skip: nothing between the pause and the resume (beyond the grace) fires.
    assert resumed and min(resumed) >= later - timedelta(seconds=60)
    assert min(resumed) == base + timedelta(minutes=10)  # 30 s late: within the grace
    no_doubles()


def test_fire_last_fires_the_latest_missed_once(team) -> None:
    base = future_base()
    schedule = make(
        team, base, every_seconds=60, start_at=base - timedelta(hours=1), missed="fire_last"
    )
    poller = poller_build()
    poller.iterate(now=base + timedelta(seconds=30))
    got = live_instants(schedule)
    # Missed since start_at (an hour ago): only the latest before the grace, once.
    assert got[0] == base - timedelta(seconds=60)
    assert got[1:] == [base + timedelta(minutes=m) for m in range(5)]
    poller.iterate(now=base + timedelta(seconds=40))
    assert live_instants(schedule) == got


def test_skip_with_a_past_start_fires_none_of_the_missed(team) -> None:
    base = future_base()
    schedule = make(team, base, every_seconds=60, start_at=base - timedelta(hours=1))
    poller = poller_build()
    poller.iterate(now=base + timedelta(seconds=119))
    got = live_instants(schedule)
    assert got[0] == base + timedelta(minutes=1)  # 60 s of grace, not an hour of backlog


def test_patch_replans_future_occurrences_without_doubling(team) -> None:
    base = future_base()
    schedule = make(team, base, every_seconds=60, start_at=base, payload={"v": 1})
    poller = poller_build()
    poller.iterate(now=base)
    before = live_instants(schedule)
    schedule_update(
        team=team,
        schedule_id=schedule.id,
        changes={"payload": {"v": 2}},
        now=base + timedelta(seconds=5),
    )
    poller.iterate(now=base + timedelta(seconds=5))
    after = live_instants(schedule)
    assert after[: len(before)] == before  # same instants, planned again
    future = Job.objects.filter(schedule_id=schedule.id, scheduled_for__gt=base).exclude(
        status=JobStatus.CANCELED
    )
    assert {tuple(j.payload.items()) for j in future} == {(("v", 2),)}
    no_doubles()
    schedule_update(
        team=team,
        schedule_id=schedule.id,
        changes={"cron": "*/2 * * * *"},
        now=base + timedelta(seconds=6),
    )
    poller.iterate(now=base + timedelta(seconds=6))
    upcoming = [t for t in live_instants(schedule) if t > base]
    assert upcoming and all(t.minute % 2 == 0 for t in upcoming)
    no_doubles()


def test_delete_cancels_pending_and_keeps_delivered(team) -> None:
    base = future_base()
    schedule = make(team, base, every_seconds=60, start_at=base)
    sink = RecordingSink()
    poller = poller_build(sink=sink)
    poller.iterate(now=base)
    poller.iterate(now=base + timedelta(seconds=1))
    schedule_delete(team=team, schedule_id=schedule.id, now=base + timedelta(seconds=2))
    statuses = Counter(Job.objects.filter(schedule_id=schedule.id).values_list("status", flat=True))
    assert statuses["delivered"] == 1 and statuses["canceled"] == 4
    assert not Schedule.objects.filter(id=schedule.id).exists()


@pytest.mark.parametrize(
    ("zone", "cron", "start", "expected"),
    [
        # New York spring-forward 2027-03-14: 02:30 does not exist -> 03:00 EDT (07:00Z).
        (
            "America/New_York",
            "30 2 * * *",
            datetime(2027, 3, 13, 12, tzinfo=UTC),
            [datetime(2027, 3, 14, 7, 0, tzinfo=UTC), datetime(2027, 3, 15, 6, 30, tzinfo=UTC)],
        ),
        # New York fall-back 2027-11-07: 01:30 happens twice -> once, the earlier (05:30Z).
        (
            "America/New_York",
            "30 1 * * *",
            datetime(2027, 11, 6, 12, tzinfo=UTC),
            [datetime(2027, 11, 7, 5, 30, tzinfo=UTC), datetime(2027, 11, 8, 6, 30, tzinfo=UTC)],
        ),
        # London spring-forward 2027-03-28: 01:30 does not exist -> 02:00 BST (01:00Z).
        (
            "Europe/London",
            "30 1 * * *",
            datetime(2027, 3, 27, 12, tzinfo=UTC),
            [datetime(2027, 3, 28, 1, 0, tzinfo=UTC), datetime(2027, 3, 29, 0, 30, tzinfo=UTC)],
        ),
        # London fall-back 2027-10-31: 01:30 twice -> once, at 01:30 BST (00:30Z).
        (
            "Europe/London",
            "30 1 * * *",
            datetime(2027, 10, 30, 12, tzinfo=UTC),
            [datetime(2027, 10, 31, 0, 30, tzinfo=UTC), datetime(2027, 11, 1, 1, 30, tzinfo=UTC)],
        ),
    ],
)
def test_dst_occurrences_materialize_once(team, settings, zone, cron, start, expected) -> None:
    settings.SENDLATER_SCHEDULE_AHEAD_SECONDS = 86_400  # two days planned at once
    schedule = make(team, start, cron=cron, timezone=zone)
    poller = poller_build()
    poller.iterate(now=start)
    assert live_instants(schedule) == expected
    poller.iterate(now=start + timedelta(hours=1))
    assert live_instants(schedule) == expected


def test_handler_delivery_and_webhook_body_carry_the_schedule(team) -> None:
    import json

    from polling.dispatch.router import Router, sinks_build
    from polling.dispatch.webhook import request_body
    from scheduling.handlers import _registry, register

    seen = []

    @register("remember")
    def remember(delivery) -> None:
        seen.append(delivery)

    try:
        base = future_base()
        spec = ScheduleSpec(
            target_kind="handler", target="remember", every_seconds=60, start_at=base
        )
        schedule = schedule_create(team=team, spec=spec, now=base)
        poller = poller_build(sink=Router(sinks_build(concurrency=2)))
        poller.iterate(now=base)
        poller.iterate(now=base + timedelta(seconds=1))
    finally:
        _registry.pop("remember", None)
    assert [(d.schedule_id, d.scheduled_for) for d in seen] == [(schedule.id, base)]
    claimed = RecordingSink()
    other = poller_build("p2", sink=claimed)
    Job.objects.filter(schedule_id=schedule.id).update(
        target_kind="webhook", target="https://x.test/"
    )
    poller.shutdown()
    other.iterate(now=base + timedelta(minutes=1, seconds=1))
    other.iterate(now=base + timedelta(minutes=1, seconds=2))
    body = json.loads(request_body(claimed.seen[0]))
    assert body["schedule_id"] == str(schedule.id)
    assert body["scheduled_for"] == (base + timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    plain = json.loads(
        request_body(type(claimed.seen[0])(**{**_fields(claimed.seen[0]), "schedule_id": None}))
    )
    assert "schedule_id" not in plain and "scheduled_for" not in plain


def _fields(job) -> dict:
    return {name: getattr(job, name) for name in job.__slots__}


def test_occurrences_carry_the_schedules_flow_control_key(team) -> None:
    base = future_base()
    keyed = make(team, base, every_seconds=60, start_at=base, flow_control_key="partner")
    plain = make(team, base, every_seconds=60, start_at=base)
    poller = poller_build()
    poller.iterate(now=base - timedelta(seconds=1))
    jobs = Job.objects.filter(schedule_id=keyed.id)
    assert jobs.count() >= 3
    assert set(jobs.values_list("flow_control_key", flat=True)) == {"partner"}
    assert set(
        Job.objects.filter(schedule_id=plain.id).values_list("flow_control_key", flat=True)
    ) == {None}
    # A new key re-plans the future: the pending occurrences are made again with it.
    schedule_update(
        team=team,
        schedule_id=keyed.id,
        changes={"flow_control_key": "other"},
        now=base - timedelta(seconds=1),
    )
    poller.iterate(now=base - timedelta(seconds=1))
    live = Job.objects.filter(schedule_id=keyed.id, status=JobStatus.PENDING)
    assert live.exists()
    assert set(live.values_list("flow_control_key", flat=True)) == {"other"}
    no_doubles()
