"""Bulk cancel: the team's pending jobs chosen by ids and/or metadata, in one UPDATE.

One job at a time is ``services.job_cancel``, which reports why a job could not
be canceled; this one counts what it canceled and leaves the rest alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from scheduling.clock import db_now
from scheduling.errors import SchedulingError
from scheduling.models import Job, JobStatus, Team
from scheduling.selectors import job_filter_metadata


def job_cancel_many(
    *,
    team: Team,
    ids: Sequence[uuid.UUID | str] | None = None,
    metadata: dict[str, str] | None = None,
    now: datetime | None = None,
) -> int:
    """Cancel the team's pending jobs matching ``ids`` and/or ``metadata``; return how many.

    One UPDATE whatever the number of jobs. Rows a poller has already claimed are
    not pending and stay as they are; the UPDATE re-checks the status of each row
    it locks, so a job is never both canceled and claimed.
    """
    if ids is None and not metadata:
        raise SchedulingError("give ids or metadata to select the jobs to cancel.", field="ids")
    now = now or db_now()
    jobs = Job.objects.filter(team=team, status=JobStatus.PENDING)
    if ids is not None:
        jobs = jobs.filter(id__in=list(ids))
    if metadata:
        jobs = job_filter_metadata(jobs, metadata)
    return jobs.update(status=JobStatus.CANCELED, updated_at=now)
