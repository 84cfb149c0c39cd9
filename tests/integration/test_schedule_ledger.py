"""The schedule ledger stays bounded (issue 30, item 3): rows before each schedule's
``ledger_floor`` are pruned by the pollers' upkeep, and no materializer, however far
behind, fires an occurrence whose ledger row was pruned (both databases)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from polling.models import ShardLease
from polling.upkeep.ledger_prune import ledger_prune
from polling.upkeep.schedules import occurrences_write_fenced, plan, schedules_due
from scheduling.jobs.deadletters import job_requeue
from scheduling.models import Job, JobStatus, Schedule, ScheduleOccurrence
from scheduling.schedules.services import (
    ScheduleSpec,
    schedule_create,
    schedule_pause,
    schedule_resume,
)
from tests.support.pollers import RecordingSink, future_base, poller_build

pytestmark = pytest.mark.django_db
AHEAD = 120
KEEP = 300


@pytest.fixture(autouse=True)
def _ledger(settings) -> None:
    settings.SENDLATER_SCHEDULE_AHEAD_SECONDS = AHEAD
    settings.SENDLATER_SCHEDULE_LEDGER_KEEP_SECONDS = KEEP
    settings.SENDLATER_SCHEDULE_LEDGER_PRUNE_SECONDS = 0.001  # every poller pass


def make(team, now, **fields):
    spec = ScheduleSpec(target_kind="handler", target="noop", **fields)
    return schedule_create(team=team, spec=spec, now=now)


def ledger(schedule) -> int:
    return ScheduleOccurrence.objects.filter(schedule_id=schedule.id).count()


def live_counts(schedule) -> Counter:
    jobs = Job.objects.filter(schedule_id=schedule.id).exclude(status=JobStatus.CANCELED)
    return Counter(jobs.values_list("scheduled_for", flat=True))


def test_the_ledger_stays_bounded_while_a_schedule_keeps_firing(team) -> None:
    base = future_base()
    every = 10
    schedule = make(team, base, every_seconds=every, start_at=base)
    sink = RecordingSink()
    poller = poller_build(sink=sink)
    sizes = []
    for minute in range(0, 150, 1):
        poller.iterate(now=base + timedelta(minutes=minute, seconds=30))
        sizes.append(ledger(schedule))
    # Kept: the rows from the floor (``KEEP`` behind now when the planner last moved
    # it, up to AHEAD ago) to the cursor (up to 2 x AHEAD ahead), one every ``every``
    # seconds, plus a pass of slack.
    bound = (KEEP + 3 * AHEAD + 60) // every + 1
    assert max(sizes) <= bound, max(sizes)
    assert max(sizes[-30:]) <= max(sizes[30:60]) + 1  # flat (a saw tooth), not growing
    floor = Schedule.objects.get(id=schedule.id).ledger_floor
    assert floor is not None and floor >= base + timedelta(minutes=149, seconds=30 - KEEP - AHEAD)
    assert not ScheduleOccurrence.objects.filter(
        schedule_id=schedule.id, scheduled_for__lt=floor
    ).exists()
    # The guarantee unchanged: every instant once, none missing, none doubled.
    counts = live_counts(schedule)
    assert max(counts.values()) == 1
    last = max(counts)
    expected = [
        base + timedelta(seconds=every * k) for k in range((last - base).seconds // every + 1)
    ]
    assert sorted(counts) == expected
    assert len(expected) > 150 * 60 // every  # it kept firing the whole time
    delivered = [j.scheduled_for for j in sink.seen if j.schedule_id == schedule.id]
    assert len(delivered) == len(set(delivered))


def _leases() -> dict[int, int]:
    return dict(ShardLease.objects.filter(owner="p1").values_list("shard", "epoch"))


def test_a_stale_materializer_cannot_refire_a_pruned_occurrence(team) -> None:
    """A plan read before the floor moved, holding instants whose ledger rows were
    pruned since, writes nothing, even with the cursor and version it expects."""
    base = future_base()
    schedule = make(team, base, every_seconds=60, start_at=base)
    poller = poller_build()
    poller.iterate(now=base - timedelta(seconds=AHEAD))  # leases; plans the first instants
    leases = _leases()
    stale_row = schedules_due(shards=sorted(leases), until=base + timedelta(hours=1), limit=10)[0]
    shard = int(stale_row[17]) % int(stale_row[18])
    # Read at ``base``: its cursor is some minutes in; it plans an hour of instants.
    stale = plan(
        stale_row, epoch=leases[shard], shard=shard, now=base, until=base + timedelta(hours=1)
    )
    assert stale.instants
    for minute in range(0, 40):  # time goes on: fired, and the floor moves past them
        poller.iterate(now=base + timedelta(minutes=minute, seconds=30))
    floor = Schedule.objects.get(id=schedule.id).ledger_floor
    assert floor is not None and floor > min(stale.instants)
    pruned = [i for i in stale.instants if i < floor]
    assert (
        pruned
        and not ScheduleOccurrence.objects.filter(
            schedule_id=schedule.id, scheduled_for__in=pruned
        ).exists()
    )
    assert all(live_counts(schedule)[i] == 1 for i in pruned)  # they did fire, once
    # The worst case for the stale plan: the row shows the very cursor and version it
    # read (as after an operator put the cursor back), and its lease (owner, epoch) is
    # still good: only the floor stands in its way.
    Schedule.objects.filter(id=schedule.id).update(next_at=stale.next_at, version=stale.version)
    ShardLease.objects.filter(shard=shard).update(
        owner="p1", epoch=stale.epoch, expires_at=base + timedelta(hours=2)
    )
    assert occurrences_write_fenced(owner="p1", plans=[stale], now=base) == 0
    assert max(live_counts(schedule).values()) == 1
    # A fresh read plans from there again, leaving the instants before the floor out.
    row = schedules_due(shards=sorted(leases), until=base + timedelta(hours=2), limit=10)[0]
    now = base + timedelta(minutes=40)
    fresh = plan(row, epoch=leases[shard], shard=shard, now=now, until=now + timedelta(minutes=2))
    assert fresh.instants and min(fresh.instants) >= floor
    occurrences_write_fenced(owner="p1", plans=[fresh], now=now)
    assert max(live_counts(schedule).values()) == 1


def test_a_pause_that_puts_the_cursor_behind_the_floor_does_not_refire(team) -> None:
    """``fire_last`` after a pause whose canceled occurrence lies behind the floor: the
    latest missed instant (hour 5) was delivered and its ledger row pruned; it is not
    fired again, and the schedule goes on (hour 6, canceled by the pause, fires once)."""
    base = future_base()
    schedule = make(team, base, every_seconds=3600, start_at=base, missed="fire_last")
    sink = RecordingSink()
    poller = poller_build(sink=sink)
    for minute in [*range(0, 6 * 60 - 1, 2), 6 * 60 - 1]:  # hours 0 to 5 fire; 1 dies
        poller.iterate(now=base + timedelta(minutes=minute, seconds=1))
        if not sink.dead:  # once planned (AHEAD before its instant), it is to die
            sink.dead = set(
                Job.objects.filter(
                    schedule_id=schedule.id, scheduled_for=base + timedelta(hours=1)
                ).values_list("id", flat=True)
            )
    hour = {i: base + timedelta(hours=i) for i in range(12)}
    dead = Job.objects.get(schedule_id=schedule.id, scheduled_for=hour[1])
    assert dead.status == JobStatus.DEAD
    assert Job.objects.get(schedule_id=schedule.id, scheduled_for=hour[5]).status == "delivered"
    # Hour 6 was planned at 5:58 (the floor moved to 5:53), hour 5's row pruned since.
    now = base + timedelta(hours=5, minutes=59, seconds=10)
    assert Schedule.objects.get(id=schedule.id).ledger_floor > hour[5]
    assert not ScheduleOccurrence.objects.filter(
        schedule_id=schedule.id, scheduled_for=hour[5]
    ).exists()
    job_requeue(team=team, job_id=dead.id, now=now)  # pending again, an old instant
    schedule_pause(team=team, schedule_id=schedule.id, now=now)
    assert Schedule.objects.get(id=schedule.id).next_at == hour[1]  # back behind the floor
    schedule_resume(team=team, schedule_id=schedule.id, now=now)
    for minute in range(0, 200, 5):
        poller.iterate(now=now + timedelta(minutes=minute))
    counts = live_counts(schedule)
    assert max(counts.values()) == 1, counts.most_common(2)
    assert counts[hour[5]] == 1  # delivered once, not fired again by fire_last
    assert counts[hour[6]] == 1 and counts[hour[8]] == 1  # the schedule goes on


def test_ledger_prune_takes_only_rows_behind_the_floor_of_my_shards(team, settings) -> None:
    settings.SENDLATER_SCHEDULE_LEDGER_PRUNE_SECONDS = 0  # the pollers prune nothing here
    base = future_base()
    schedule = make(team, base, every_seconds=60, start_at=base)
    other = make(team, base, every_seconds=60, start_at=base)
    poller = poller_build()
    poller.iterate(now=base - timedelta(seconds=AHEAD))
    for minute in range(0, 20):
        poller.iterate(now=base + timedelta(minutes=minute))
    floor = Schedule.objects.get(id=schedule.id).ledger_floor
    assert floor is not None and floor > base + timedelta(minutes=10)
    floor = floor.replace(second=0, microsecond=0)  # a planned instant: its row stays
    Schedule.objects.filter(id__in=[schedule.id, other.id]).update(ledger_floor=floor)
    before = {s.id: ledger(s) for s in (schedule, other)}
    count = ShardLease.objects.count()
    mine = Schedule.objects.get(id=schedule.id).shard_hash % count
    report = ledger_prune(shards=[mine], batch=1)
    assert report.resume_after is None and report.deleted > 0
    assert not ScheduleOccurrence.objects.filter(
        schedule_id=schedule.id, scheduled_for__lt=floor
    ).exists()
    assert ScheduleOccurrence.objects.filter(schedule_id=schedule.id, scheduled_for=floor).exists()
    if Schedule.objects.get(id=other.id).shard_hash % count != mine:
        assert ledger(other) == before[other.id]  # another poller's schedule: left alone
    assert ledger_prune(shards=[mine]).deleted == 0  # nothing more to take
