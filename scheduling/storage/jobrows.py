"""One job row, addressed the way the partitioned table wants: lock it, update it.

Shared by the services that change a single existing job (cancel, reschedule,
requeue); the caller holds the transaction and checks the job's status.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from scheduling.errors import JobNotFound
from scheduling.models import Job, Team


def job_for_update(*, team: Team, job_id: uuid.UUID | str) -> Job:
    """Lock and return the team's job ``job_id``; JobNotFound for another team's or none.

    Call inside ``transaction.atomic``: the row lock lasts until it commits.
    """
    job = Job.objects.select_for_update().filter(id=job_id, team=team).first()
    if job is None:
        raise JobNotFound(f"job {job_id} does not exist.", field="id")
    return job


def job_save_in_partition(job: Job, *, old_bucket: datetime, fields: Sequence[str]) -> None:
    """UPDATE ``fields`` of ``job`` addressed by id and its current bucket.

    The bucket predicate lets PostgreSQL prune to the one partition that holds the
    row (by id alone the UPDATE would probe every partition). A new bucket in
    ``fields`` moves the row to another partition.
    """
    Job.objects.filter(id=job.id, bucket=old_bucket).update(
        **{name: getattr(job, name) for name in fields}
    )
