"""Dead letters: give a dead or expired job a new attempt series.

Listing them is ``selectors.job_list(status="dead")``; their attempts are
``selectors.delivery_attempt_list``.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db import transaction

from scheduling import keys
from scheduling.errors import JobNotPending
from scheduling.models import Job, JobStatus, Team
from scheduling.sharding.buckets import shard_counts_record
from scheduling.sharding.clock import db_now, open_bucket
from scheduling.storage.jobrows import job_for_update, job_save_in_partition

_REQUEUE_FIELDS = [
    "bucket",
    "shard",
    "due_at",
    "status",
    "attempts",
    "expires_at",
    "updated_at",
]


def job_requeue(*, team: Team, job_id: uuid.UUID | str, now: datetime | None = None) -> Job:
    """Give a dead (or expired) job a new attempt series, due now in the open bucket."""
    now = now or db_now()
    with transaction.atomic():
        job = job_for_update(team=team, job_id=job_id)
        if job.status not in (JobStatus.DEAD, JobStatus.EXPIRED):
            raise JobNotPending(
                f"job {job_id} is {job.status}; only dead or expired jobs can be requeued.",
                field="status",
            )
        old_bucket = job.bucket
        job.bucket = open_bucket(now)
        job.shard = keys.shard_of(job.id, shard_counts_record([job.bucket])[job.bucket])
        job.due_at = now
        job.status = JobStatus.PENDING
        job.attempts = 0
        job.expires_at = None
        job.updated_at = now
        job_save_in_partition(job, old_bucket=old_bucket, fields=_REQUEUE_FIELDS)
    return job
