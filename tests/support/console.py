"""Rows for console tests: shards, pollers, leases and jobs placed exactly."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from polling.models import Poller, PollerState, ShardCheckpoint, ShardLease
from polling.ownership.registration import shard_rows_ensure
from scheduling import keys
from scheduling.models import Job, JobStatus, Team


def shards_make(count: int) -> None:
    shard_rows_ensure(shard_count=count)


def poller_make(name: str, *, now: datetime, age_seconds: float = 0.0, state: str = "active"):
    return Poller.objects.create(
        name=name,
        host="test",
        pid=1,
        started_at=now - timedelta(hours=1),
        heartbeat_at=now - timedelta(seconds=age_seconds),
        state=state or PollerState.ACTIVE,
        version="test-1",
    )


def lease_hold(shard: int, owner: str, *, now: datetime, epoch: int = 1) -> None:
    # Tests stand in for a poller here; the console itself never writes lease rows.
    ShardLease.objects.filter(shard=shard).update(
        owner=owner, epoch=epoch, expires_at=now + timedelta(seconds=15), acquired_at=now
    )


def job_make(
    team: Team,
    *,
    shard: int,
    due_at: datetime,
    status: str = JobStatus.PENDING,
    delivered_at: datetime | None = None,
    **extra,
) -> Job:
    return Job.objects.create(
        id=uuid.uuid4(),
        team=team,
        due_at=due_at,
        bucket=keys.bucket_of(due_at, 60),
        shard=shard,
        status=status,
        target_kind="handler",
        target="noop",
        delivered_at=delivered_at,
        **extra,
    )


def lagging(shard: int, *, now: datetime, minutes: int) -> None:
    """Make ``shard`` drained up to ``minutes`` ago, so its due work lags."""
    ShardCheckpoint.objects.filter(shard=shard).update(
        last_drained=keys.bucket_of(now - timedelta(minutes=minutes), 60)
    )


def operator_make(username: str, *, perms: tuple[str, ...] = ()):
    """A staff user who can view the polling and scheduling admin, plus ``perms``."""
    user = get_user_model().objects.create_user(username, password="pw-123456", is_staff=True)
    codenames = [
        "view_shardlease",
        "view_poller",
        "view_shardcheckpoint",
        "view_job",
        "view_shardcountschedule",
        *perms,
    ]
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user
