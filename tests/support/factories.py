"""Test data builders."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from scheduling.jobs.inflight import ids_text
from scheduling.jobs.services import JobSpec
from scheduling.models import InFlightBatch, Job, Team
from scheduling.sharding.clock import db_now


def team_create(*, slug: str = "acme", name: str | None = None) -> Team:
    return Team.objects.create(slug=slug, name=name or slug.title())


def job_spec(
    *,
    due_at: datetime | None = None,
    in_seconds: float = 60,
    handler: str = "noop",
    payload: Any = None,
    **extra: Any,
) -> JobSpec:
    return JobSpec(
        due_at=due_at or db_now() + timedelta(seconds=in_seconds),
        target_kind="handler",
        target=handler,
        payload=payload if payload is not None else {"n": 1},
        **extra,
    )


def in_flight_mark(*jobs: Job, owner: str = "gone", epoch: int = 1) -> InFlightBatch:
    """Record ``jobs`` (one shard) as a poller's batch in flight, as a read would."""
    return InFlightBatch.objects.create(
        shard=jobs[0].shard,
        epoch=epoch,
        owner=owner,
        job_ids=ids_text(job.id for job in jobs),
        job_count=len(jobs),
        created_at=db_now(),
    )
