"""Reads for pollers, the lag command and the admin: no locks, no writes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, Min

from polling.common.sql import dt
from polling.models import PollerState, ShardCheckpoint, ShardLease
from scheduling import conf as scheduling_conf
from scheduling import keys
from scheduling.buckets import shard_count_max as shard_count_max
from scheduling.inflight import in_flight_by_shard
from scheduling.models import Job, JobStatus

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
    due_backlog: int  # due pending jobs not in flight
    oldest_due_age_seconds: float | None
    in_flight: int  # jobs read by the owner and not yet written back (its window)


def shard_lag_seconds(
    *,
    depth: int,
    checkpoint: datetime | None,
    oldest: datetime | None,
    now: datetime,
    width_seconds: int,
) -> float:
    """``now - (checkpoint + W)`` while due jobs wait (``depth``); 0 when none do.

    A shard never drained yet counts from its oldest due job instead.
    """
    if not depth:
        return 0.0
    start = checkpoint + timedelta(seconds=width_seconds) if checkpoint else oldest
    return max(0.0, (now - start).total_seconds()) if start else 0.0


def shard_lag_list(*, now: datetime) -> list[ShardLag]:
    """Per shard: owner, epoch, checkpoint, lag, due backlog, oldest due job age, in flight.

    Lag is ``now - (checkpoint + W)`` while due jobs wait (0 when none do). The
    backlog is one grouped query over pending rows in buckets up to the open one,
    so it reads the backlog's own index range, never the future. Jobs in flight are
    still pending rows: they come from the shards' in-flight batches and are left
    out of the backlog.
    """
    width = scheduling_conf.bucket_seconds()
    open_bucket = keys.bucket_of(now, width)
    backlog = {
        row["shard"]: row
        for row in Job.objects.filter(
            status=JobStatus.PENDING, bucket__lte=open_bucket, due_at__lte=now
        )
        .values("shard")
        .annotate(depth=Count("id"), oldest=Min("due_at"))
    }
    checkpoints = dict(ShardCheckpoint.objects.values_list("shard", "last_drained"))
    in_flight = in_flight_by_shard()
    result: list[ShardLag] = []
    for lease in ShardLease.objects.order_by("shard"):
        row = backlog.get(lease.shard)
        checkpoint = checkpoints.get(lease.shard)
        depth = row["depth"] if row else 0
        lag = shard_lag_seconds(
            depth=depth,
            checkpoint=checkpoint,
            oldest=row["oldest"] if row else None,
            now=now,
            width_seconds=width,
        )
        result.append(
            ShardLag(
                shard=lease.shard,
                owner=lease.owner if lease.expires_at and lease.expires_at > now else None,
                epoch=lease.epoch,
                expires_at=lease.expires_at,
                pinned_to=lease.pinned_to,
                checkpoint=checkpoint,
                lag_seconds=lag,
                due_backlog=max(0, depth - in_flight.get(lease.shard, 0)),
                oldest_due_age_seconds=(now - row["oldest"]).total_seconds() if row else None,
                in_flight=in_flight.get(lease.shard, 0),
            )
        )
    return result
