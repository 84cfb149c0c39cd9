"""A poller killed while it materializes recurring schedules: no occurrence missing,
none doubled.

p0 exits (``os._exit``, as kill -9) the first time it materializes, after its ledger
rows went in and before its jobs did, with the transaction open. Its work rolls back
with its connection; p1 takes its shards when the lease expires and plans those
schedules from their cursors. Then, for every schedule, the jobs' instants must be
exactly the rule's instants from its first up to the last one planned, each once,
and the ledger must hold one row per job at or after the schedule's ledger floor:
the pollers prune the ledger all along (kept 5 s, pruned every second), so pruning
racing the kill and the takeover changes nothing of the guarantee.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta

from scheduling.models import Job, JobStatus, Schedule, ScheduleOccurrence, Team
from scheduling.schedules.services import ScheduleSpec, schedule_create
from scheduling.sharding.clock import db_now
from tests.faults import cluster as cluster_module
from tests.faults.cluster import LEASE_SECONDS, sql

SCHEDULES = 300
EVERY_SECONDS = 5
AHEAD_SECONDS = 20
LEDGER_KEEP_SECONDS = 5


def _all_planned_ahead() -> bool:
    (behind,) = sql(
        "SELECT count(*) FROM scheduling_schedule WHERE next_at <= statement_timestamp() + %s",
        [timedelta(seconds=AHEAD_SECONDS)],
    )[0]
    return behind == 0


def _pruned_everywhere() -> bool:
    """Every schedule's floor is past its first instant, whose ledger row is gone."""
    (left,) = sql(
        "SELECT count(*) FROM scheduling_schedule s WHERE s.ledger_floor IS NULL"
        " OR s.ledger_floor <= s.anchor_at OR EXISTS (SELECT 1 FROM"
        " scheduling_scheduleoccurrence o WHERE o.schedule_id = s.id"
        " AND o.scheduled_for < s.ledger_floor)",
        [],
    )[0]
    return left == 0


def test_kill_while_materializing_leaves_no_gap_and_no_double(
    make_cluster, monkeypatch, settings
) -> None:
    monkeypatch.setitem(
        cluster_module.CHILD_ENV, "SENDLATER_SCHEDULE_AHEAD_SECONDS", str(AHEAD_SECONDS)
    )
    monkeypatch.setitem(
        cluster_module.CHILD_ENV,
        "SENDLATER_SCHEDULE_LEDGER_KEEP_SECONDS",
        str(LEDGER_KEEP_SECONDS),
    )
    monkeypatch.setitem(cluster_module.CHILD_ENV, "SENDLATER_SCHEDULE_LEDGER_PRUNE_SECONDS", "1")
    settings.SENDLATER_SCHEDULE_AHEAD_SECONDS = AHEAD_SECONDS
    cluster = make_cluster(pollers=2, failpoints={"p0": "schedules_after_ledger=once-exit"})
    team = Team.objects.create(slug=f"sched-{time.monotonic_ns()}", name="schedules")
    for _ in range(SCHEDULES):
        spec = ScheduleSpec(target_kind="handler", target="noop", every_seconds=EVERY_SECONDS)
        schedule_create(team=team, spec=spec)
    assert cluster.pollers["p0"].wait(timeout=30) == 137  # died inside materialization
    killed_at = db_now()
    deadline = time.monotonic() + LEASE_SECONDS * 10
    while not (_all_planned_ahead() and "p0" not in cluster.lease_owners()):
        assert time.monotonic() < deadline, f"not planned again; logs in {cluster.tmp}"
        time.sleep(0.2)
    time.sleep(EVERY_SECONDS + 1)  # some occurrences of p0's schedules fall due and go out
    # Each schedule's floor moves (to its cursor or now - LEDGER_KEEP_SECONDS) when it
    # is next planned, within AHEAD_SECONDS; the rows behind it are pruned meanwhile.
    deadline = time.monotonic() + AHEAD_SECONDS * 3
    while not _pruned_everywhere():
        assert time.monotonic() < deadline, f"ledger not pruned; logs in {cluster.tmp}"
        time.sleep(0.5)
    cluster.stop_all()

    jobs = Job.objects.filter(schedule_id__isnull=False).exclude(status=JobStatus.CANCELED)
    counts = Counter(jobs.values_list("schedule_id", "scheduled_for"))
    assert counts and max(counts.values()) == 1, counts.most_common(3)  # none doubled
    by_schedule: dict = {}
    for schedule_id, instant in counts:
        by_schedule.setdefault(schedule_id, set()).add(instant)
    schedules = list(Schedule.objects.filter(team=team))
    assert len(by_schedule) == len(schedules) == SCHEDULES
    missing = 0
    for schedule in schedules:
        got = by_schedule[schedule.id]
        steps = int((max(got) - schedule.anchor_at).total_seconds()) // EVERY_SECONDS
        expected = {
            schedule.anchor_at + timedelta(seconds=EVERY_SECONDS * k) for k in range(steps + 1)
        }
        missing += len(expected - got)
        assert got <= expected
        assert schedule.last_occurrence_at == max(got)
        assert schedule.next_at > killed_at + timedelta(seconds=AHEAD_SECONDS)
    assert missing == 0  # none missing: every instant from the first to the last planned
    # The ledger: one row per job at or after its schedule's floor, none before it.
    floors = {s.id: s.ledger_floor for s in schedules}
    kept = sum(1 for sid, instant in counts if floors[sid] is None or instant >= floors[sid])
    pruned = sum(counts.values()) - ScheduleOccurrence.objects.count()
    assert ScheduleOccurrence.objects.count() == kept
    assert pruned > 0  # the pollers pruned while all this went on
    delivered = jobs.filter(status=JobStatus.DELIVERED).count()
    assert delivered >= SCHEDULES  # and they are delivered like any job
    print(
        f"schedules: kill -9 while materializing: {SCHEDULES} schedules, "
        f"{sum(counts.values())} occurrences, 0 doubled, 0 missing, {delivered} delivered, "
        f"{pruned} ledger rows pruned meanwhile"
    )
