"""Bulk cancel: the team's pending jobs chosen by ids and/or metadata, in one UPDATE.

One job at a time is ``services.job_cancel``, which reports why a job could not
be canceled; this one counts what it canceled and leaves the rest alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from scheduling.errors import SchedulingError
from scheduling.jobs.inflight import in_flight_frozen
from scheduling.jobs.selectors import job_filter_metadata
from scheduling.models import Job, JobStatus, Team
from scheduling.sharding.clock import db_now


def job_cancel_many(
    *,
    team: Team,
    ids: Sequence[uuid.UUID | str] | None = None,
    metadata: dict[str, str] | None = None,
    now: datetime | None = None,
) -> int:
    """Cancel the team's pending jobs matching ``ids`` and/or ``metadata``; return how many.

    One UPDATE whatever the number of jobs, in a transaction that first takes every
    shard's window lock (shared) and reads the ids in flight
    (``scheduling.jobs.inflight.in_flight_frozen``): jobs being delivered stay as they are,
    and no poller takes a new batch until the UPDATE commits. The UPDATE re-checks
    the status of each row it locks, so a job is never both canceled and delivered.
    """
    if ids is None and not metadata:
        raise SchedulingError("give ids or metadata to select the jobs to cancel.", field="ids")
    now = now or db_now()
    with transaction.atomic():
        busy = in_flight_frozen()
        jobs = Job.objects.filter(team=team, status=JobStatus.PENDING)
        if ids is not None:
            jobs = jobs.filter(id__in=[i for i in map(_as_uuid, ids) if i not in busy])
        if metadata:
            jobs = job_filter_metadata(jobs, metadata)
        if busy and ids is None:
            jobs = jobs.exclude(id__in=list(busy))
        return jobs.update(status=JobStatus.CANCELED, updated_at=now)


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID | str:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return value  # not an id: matches no job
