"""Reads: a team's jobs, one or filtered. Each returns a queryset or a model."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.lookups import Exact

from scheduling.errors import JobNotFound
from scheduling.models import DeliveryAttempt, Job, JobStatus, TargetKind, Team
from scheduling.storage.jobread import job_row_get

# The list's order: due time, then id so that ties have a stable place (cursors).
JOB_LIST_ORDER = ("due_at", "id")


def job_filter_metadata(jobs: QuerySet[Job], metadata: dict[str, str]) -> QuerySet[Job]:
    """Keep the jobs whose metadata holds every ``key: value`` pair given.

    PostgreSQL: ``metadata @> {...} AND metadata <> '{}'``, served by the GIN index
    ``job_metadata_gin`` (partial: only jobs with metadata; the second condition,
    implied by the first, lets the planner see that it applies).
    SQLite has no containment operator: one ``json_extract`` comparison per key
    (keys are taken literally, ``__`` and dots included).
    """
    if not metadata:
        return jobs
    if connection.vendor == "postgresql":
        return jobs.filter(metadata__contains=metadata).exclude(metadata={})
    for key, value in metadata.items():
        jobs = jobs.filter(Exact(KeyTextTransform(key, "metadata"), value))
    return jobs


def job_get(*, team: Team, job_id: uuid.UUID | str) -> Job:
    """Return the team's job ``job_id``; JobNotFound for another team's or no job."""
    if not isinstance(job_id, uuid.UUID):
        try:
            job_id = uuid.UUID(job_id)
        except ValueError:
            raise JobNotFound(f"job {job_id} does not exist.", field="id") from None
    return job_of_team(team=team, job_id=job_id, job=job_row_get(job_id))


def job_of_team(*, team: Team, job_id: uuid.UUID, job: Job | None) -> Job:
    """``job`` (read by the primary key alone, a prepared statement) if it is the team's;
    JobNotFound for another team's or no job."""
    if job is None or job.team_id != team.pk:
        raise JobNotFound(f"job {job_id} does not exist.", field="id")
    return job


def delivery_attempt_list(*, job: Job) -> list[DeliveryAttempt]:
    """The job's delivery attempts, oldest first (indexed by job and attempt).

    Failed attempts are rows; a successful one writes no row (``polling.writing.attempts``):
    a delivered job's last attempt is read from the job itself and comes last.
    """
    attempts = list(DeliveryAttempt.objects.filter(job=job).order_by("started_at", "attempt", "id"))
    if job.status == JobStatus.DELIVERED and job.last_attempt_at is not None:
        attempts.append(
            DeliveryAttempt(
                job=job,
                attempt=job.attempts,
                started_at=job.last_attempt_at,
                duration_ms=job.last_attempt_ms,
                result="delivered",
                status_code=job.last_status_code,
                error="",
            )
        )
    return attempts


def job_list(
    *,
    team: Team,
    status: str | None = None,
    due_after: datetime | None = None,
    due_before: datetime | None = None,
    metadata: dict[str, str] | None = None,
    schedule_id: uuid.UUID | None = None,
    flow_control_key: str | None = None,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> QuerySet[Job]:
    """The team's jobs ordered by ``(due_at, id)``, filtered.

    ``due_after`` is inclusive and ``due_before`` exclusive; ``after`` is a keyset
    position (the last row of the previous page), so pages stay cheap however deep.
    """
    jobs = Job.objects.filter(team=team)
    if status:
        jobs = jobs.filter(status=status)
    if due_after is not None:
        jobs = jobs.filter(due_at__gte=due_after)
    if due_before is not None:
        jobs = jobs.filter(due_at__lt=due_before)
    if metadata:
        jobs = job_filter_metadata(jobs, metadata)
    if schedule_id is not None:  # served by the partial index job_schedule_due
        jobs = jobs.filter(schedule_id=schedule_id)
    if flow_control_key is not None:  # pending ones: the partial index job_pending_flow_key
        jobs = jobs.filter(flow_control_key=flow_control_key)
    if after is not None:
        due_at, job_id = after
        jobs = jobs.filter(Q(due_at__gt=due_at) | Q(due_at=due_at, id__gt=job_id))
    return jobs.order_by(*JOB_LIST_ORDER)


# A fanned-out topic job's stored request names its children: endpoint id -> job id
# (``polling.writing.fanout``).
TOPIC_CHILDREN = "children"


def topic_deliveries(job: Job) -> list[dict[str, object]] | None:
    """Each endpoint's delivery of a fanned-out topic job, by endpoint id: its child job's
    id, status, attempts, last error and delivery time (status None: the child is gone,
    pruned by retention). None: not a topic job, or not fanned out yet. One query."""
    if job.target_kind != TargetKind.TOPIC or job.status != JobStatus.FANNED_OUT:
        return None
    named = (job.request or {}).get(TOPIC_CHILDREN) or {}
    rows = Job.objects.filter(team_id=job.team_id, id__in=list(named.values())).values_list(
        "id", "status", "attempts", "last_error", "delivered_at"
    )
    found = {str(row[0]): row[1:] for row in rows}
    out: list[dict[str, object]] = []
    for endpoint, child in sorted(named.items()):
        status, attempts, error, delivered_at = found.get(child, (None, 0, "", None))
        out.append(
            {
                "endpoint": endpoint,
                "job_id": child,
                "status": status,
                "attempts": attempts,
                "last_error": error,
                "delivered_at": delivered_at,
            }
        )
    return out


def job_status_public(job: Job, deliveries: list[dict[str, object]] | None) -> str:
    """The status the API shows: a fanned-out topic job reads ``delivered`` once every
    endpoint's delivery is."""
    if deliveries and all(d["status"] == JobStatus.DELIVERED for d in deliveries):
        return JobStatus.DELIVERED
    return str(job.status)
