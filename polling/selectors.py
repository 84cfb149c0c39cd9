"""Reads for pollers, the lag command and the admin: no locks, no writes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Case, Count, DateTimeField, F, Min, Value, When

from polling.heldbacklog import HeldKey, ShardBacklog, backlog_split, held_backlog
from polling.models import PollerState, ShardCheckpoint, ShardLease
from polling.sqlutil import dt
from scheduling import conf as scheduling_conf
from scheduling import keys
from scheduling.buckets import shard_count_max as shard_count_max
from scheduling.inflight import in_flight_by_shard
from scheduling.models import Job, JobStatus

FOLD_MINUTES = 30  # older due buckets are one group per shard in the backlog read

ASSIGNMENT_INPUTS_SQL = """
SELECT 'live', name, NULL FROM polling_poller WHERE state = %s AND heartbeat_at > %s
UNION ALL
SELECT 'pin', pinned_to, shard FROM polling_shardlease WHERE pinned_to IS NOT NULL
"""


def assignment_inputs(*, now: datetime, lease_seconds: int) -> tuple[set[str], dict[int, str]]:
    """Live pollers (active, heartbeat within the lease) and operator pins, in one query."""
    since = now - timedelta(seconds=lease_seconds)
    with connection.cursor() as cursor:
        cursor.execute(ASSIGNMENT_INPUTS_SQL, [PollerState.ACTIVE.value, dt(since)])
        rows = cursor.fetchall()
    live = {name for kind, name, _ in rows if kind == "live"}
    pins = {int(shard): name for kind, name, shard in rows if kind == "pin"}
    return live, pins


@dataclass(frozen=True)
class ShardLag:
    shard: int
    owner: str | None  # None when the lease is free or expired
    epoch: int
    expires_at: datetime | None
    pinned_to: str | None
    checkpoint: datetime | None
    lag_seconds: float
    due_backlog: int  # due pending jobs not in flight and not held by flow control
    oldest_due_age_seconds: float | None  # of those the service could send now
    in_flight: int  # jobs read by the owner and not yet written back (its window)
    held: int  # due pending jobs held by flow control (polling.heldbacklog)
    held_oldest_age_seconds: float | None


@dataclass(frozen=True)
class LagReport:
    rows: list[ShardLag]
    held_keys: list[HeldKey]  # the keys holding due jobs back, most held first


def shard_lag_seconds(
    *,
    depth: int,
    checkpoint: datetime | None,
    oldest: datetime | None,
    now: datetime,
    width_seconds: int,
    not_before: datetime | None = None,
) -> float:
    """``now - (checkpoint + W)`` while due jobs wait (``depth``); 0 when none do.

    A shard never drained yet counts from its oldest due job instead. ``not_before``:
    the earliest bucket holding a job that could go now, when jobs held by flow
    control keep the checkpoint back (their wait is not the pollers' lag).
    """
    if not depth:
        return 0.0
    start = checkpoint + timedelta(seconds=width_seconds) if checkpoint else oldest
    if start is not None and not_before is not None:
        start = max(start, not_before)
    return max(0.0, (now - start).total_seconds()) if start else 0.0


def due_backlog_rows(now: datetime, *, fold: tuple[datetime, datetime] | None) -> list[dict]:
    """Due pending rows (in buckets up to the open one) grouped by shard, with their
    count and oldest ``due_at``: one pass over the pending index.

    ``fold``: ``(first, into)``: grouped by ``(b, shard)`` as well, ``b`` the bucket,
    those before ``first`` folded into ``into`` (the leading columns of the index are
    what is grouped, and a week of backlog is still one group per shard, not one
    per minute). Bucket bound first, and ``COUNT(*)``: an index-only scan.
    """
    open_bucket = keys.bucket_of(now, scheduling_conf.bucket_seconds())
    due = Job.objects.filter(status=JobStatus.PENDING, bucket__lte=open_bucket, due_at__lte=now)
    if fold is None:
        return list(due.values("shard").annotate(depth=Count("*"), oldest=Min("due_at")))
    folded = Case(
        When(bucket__lt=fold[0], then=Value(fold[1])),
        default=F("bucket"),
        output_field=DateTimeField(),
    )
    return list(
        due.annotate(b=folded).values("b", "shard").annotate(depth=Count("*"), oldest=Min("due_at"))
    )


def shard_lag_list(*, now: datetime) -> list[ShardLag]:
    """Per shard: owner, epoch, checkpoint, lag, due backlog, oldest due job age, in
    flight and held (``shard_lag_report``)."""
    return shard_lag_report(now=now).rows


def shard_lag_report(*, now: datetime) -> LagReport:
    """Per shard: owner, epoch, checkpoint, lag, due backlog, oldest due job age, in
    flight and held; and the flow-control keys holding due jobs back.

    Lag is ``now - (checkpoint + W)`` while due jobs the service could send wait (0
    when none do). The backlog is one grouped query over pending rows in buckets up
    to the open one, so it reads the backlog's own index range, never the future.
    Jobs held by flow control (a paused key, a key at its limit) are counted apart
    (``polling.heldbacklog``) and left out of lag, backlog and oldest age. Jobs in
    flight are still pending rows: they come from the shards' in-flight batches and
    are left out of the backlog.
    """
    width = scheduling_conf.bucket_seconds()
    open_bucket = keys.bucket_of(now, width)
    held = held_backlog(now=now, open_bucket=open_bucket)
    fold = None
    if held.groups:  # by bucket too, to tell held jobs from the rest
        first = open_bucket - timedelta(minutes=FOLD_MINUTES)
        fold = (first, first - timedelta(seconds=width))
    rows = due_backlog_rows(now, fold=fold)
    backlog = backlog_split(
        ((r.get("b"), r["shard"], r["depth"], r["oldest"]) for r in rows), held.groups, fold=fold
    )
    checkpoints = dict(ShardCheckpoint.objects.values_list("shard", "last_drained"))
    in_flight = in_flight_by_shard()
    result: list[ShardLag] = []
    for lease in ShardLease.objects.order_by("shard"):
        row = backlog.get(lease.shard)
        checkpoint = checkpoints.get(lease.shard)
        result.append(
            ShardLag(
                shard=lease.shard,
                owner=lease.owner if lease.expires_at and lease.expires_at > now else None,
                epoch=lease.epoch,
                expires_at=lease.expires_at,
                pinned_to=lease.pinned_to,
                checkpoint=checkpoint,
                in_flight=in_flight.get(lease.shard, 0),
                **shard_figures(row, checkpoint, in_flight.get(lease.shard, 0), now, width),
            )
        )
    return LagReport(result, held.keys)


def shard_figures(
    row: ShardBacklog | None,
    checkpoint: datetime | None,
    in_flight: int,
    now: datetime,
    width_seconds: int,
) -> dict[str, Any]:
    """A shard's lag, due backlog, oldest due age and held figures from its split
    backlog (the lag command, ``/metrics`` and the dashboard alike)."""
    row = row or ShardBacklog()
    lag = shard_lag_seconds(
        depth=row.depth,
        checkpoint=checkpoint,
        oldest=row.oldest,
        now=now,
        width_seconds=width_seconds,
        not_before=row.first_bucket if row.held else None,
    )
    return {
        "lag_seconds": lag,
        # Jobs in flight of a held key are counted in both: never below zero.
        "due_backlog": max(0, row.depth - in_flight),
        "oldest_due_age_seconds": (now - row.oldest).total_seconds() if row.oldest else None,
        "held": row.held,
        "held_oldest_age_seconds": (
            (now - row.held_oldest).total_seconds() if row.held_oldest else None
        ),
    }
