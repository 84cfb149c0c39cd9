"""Reads for the reshard cutover form: the measured peak, the preview, the schedule."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Max, Q
from django.db.models.functions import TruncMinute

from polling.console.actions import live_poller_names
from scheduling import conf as scheduling_conf
from scheduling import keys
from scheduling.models import Bucket, Job, JobStatus, ShardCountSchedule
from scheduling.sharding import sizing
from scheduling.sharding.buckets import shard_count_for

PEAK_WINDOW = timedelta(days=1)


@dataclass(frozen=True)
class Peak:
    per_minute: int
    due_next_day: int  # the busiest bucket ahead, as jobs per minute
    delivered_last_day: int  # the busiest minute behind


@dataclass(frozen=True)
class CutoverPreview:
    shard_count: int
    effective_from: datetime
    current_shards: int
    pollers: int
    peak: Peak
    current: sizing.Plan
    proposed: sizing.Plan
    recorded_after: int  # buckets at or after the cutover already recorded
    recorded_after_other_count: int  # ...of which keep a count other than the new one


def peak_measure(*, now: datetime) -> Peak:
    """The peak rate from recorded data: the busiest bucket due in the next day
    (pending rows, read through the pending index's bucket range) and the busiest
    minute of deliveries in the last day, both as jobs per minute.
    """
    width = scheduling_conf.bucket_seconds()
    open_bucket = keys.bucket_of(now, width)
    ahead = (
        Job.objects.filter(
            status=JobStatus.PENDING, bucket__gte=open_bucket, bucket__lt=now + PEAK_WINDOW
        )
        .values("bucket")
        .annotate(n=Count("*"))
        .aggregate(m=Max("n"))["m"]
        or 0
    )
    behind = (
        Job.objects.filter(status=JobStatus.DELIVERED, delivered_at__gte=now - PEAK_WINDOW)
        .annotate(minute=TruncMinute("delivered_at"))
        .values("minute")
        .annotate(n=Count("*"))
        .aggregate(m=Max("n"))["m"]
        or 0
    )
    due = round(ahead * 60 / width)
    return Peak(per_minute=max(due, behind), due_next_day=due, delivered_last_day=behind)


def cutover_preview(*, shard_count: int, effective_from: datetime, now: datetime) -> CutoverPreview:
    """Sizing for the measured peak, today's count against the proposed one."""
    width = scheduling_conf.bucket_seconds()
    current_shards = shard_count_for(keys.bucket_of(now, width))
    pollers = max(len(live_poller_names()), 1)
    peak = peak_measure(now=now)
    capacity = float(getattr(settings, "SENDLATER_POLLER_CAPACITY_PER_SECOND", 0) or 0) or None

    def plan_for(shards: int) -> sizing.Plan:
        return sizing.plan(
            peak_per_minute=peak.per_minute,
            shards=shards,
            pollers=pollers,
            bucket_seconds=width,
            poller_capacity_per_second=capacity,
        )

    after = Bucket.objects.filter(start__gte=effective_from).aggregate(
        total=Count("id"), other=Count("id", filter=~Q(shard_count=shard_count))
    )
    return CutoverPreview(
        shard_count=shard_count,
        effective_from=effective_from,
        current_shards=current_shards,
        pollers=pollers,
        peak=peak,
        current=plan_for(current_shards),
        proposed=plan_for(shard_count),
        recorded_after=after["total"],
        recorded_after_other_count=after["other"],
    )


@dataclass(frozen=True)
class ScheduleRow:
    effective_from: datetime
    shard_count: int
    reason: str
    created_at: datetime
    state: str  # past | in force | future


def schedule_list(*, now: datetime) -> list[ScheduleRow]:
    """Every cutover, oldest first, marked past, in force (for the open bucket) or future."""
    rows = list(ShardCountSchedule.objects.order_by("effective_from"))
    open_bucket = keys.bucket_of(now, scheduling_conf.bucket_seconds())
    in_force = max(
        (r for r in rows if r.effective_from <= open_bucket),
        default=None,
        key=lambda r: r.effective_from,
    )
    if in_force is None and rows:
        in_force = rows[0]  # the earliest row also covers buckets before it
    result = []
    for row in rows:
        if row is in_force:
            state = "in force"
        elif row.effective_from > open_bucket:
            state = "future"
        else:
            state = "past"
        result.append(
            ScheduleRow(row.effective_from, row.shard_count, row.reason, row.created_at, state)
        )
    return result
