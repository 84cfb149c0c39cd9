"""The job store: jobs keyed by (bucket, shard), and the shard-count schedule."""

from __future__ import annotations

import base64
import secrets
import uuid

from django.db import models
from django.db.models import Q

from scheduling.choices import JobStatus as JobStatus
from scheduling.choices import TargetKind as TargetKind

SIGNING_SECRET_PREFIX = "whsec_"  # noqa: S105 (a format marker, not a secret)
SIGNING_SECRET_BYTES = 32


def signing_secret_generate() -> str:
    """A Standard Webhooks signing secret: ``whsec_`` + base64 of random bytes."""
    raw = secrets.token_bytes(SIGNING_SECRET_BYTES)
    return SIGNING_SECRET_PREFIX + base64.b64encode(raw).decode("ascii")


class Team(models.Model):
    """A product team: owns jobs and API keys, and signs its webhooks."""

    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Webhook signing (Standard Webhooks). During a rotation the previous secret
    # still signs (receivers accept either) until it expires.
    signing_secret = models.CharField(max_length=100, default=signing_secret_generate)
    previous_signing_secret = models.CharField(max_length=100, blank=True)
    previous_signing_secret_expires_at = models.DateTimeField(null=True, blank=True)
    # The team's delivery defaults (``GET/PATCH /api/v1/team``): a job's own retry
    # policy wins, then these, then the service's (SENDLATER_MAX_ATTEMPTS, ...).
    retry_max_attempts = models.PositiveIntegerField(null=True, blank=True)
    retry_min_backoff_seconds = models.PositiveIntegerField(null=True, blank=True)
    retry_max_backoff_seconds = models.PositiveIntegerField(null=True, blank=True)
    # Told when a job of the team ends dead or expired, unless the job names its own.
    default_on_failure_url = models.CharField(max_length=2048, blank=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class ShardCountSchedule(models.Model):
    """From ``effective_from`` on, newly recorded buckets get ``shard_count`` shards.

    The row with the greatest ``effective_from`` at or before a bucket is in
    force for it; the earliest row also covers any bucket before it.
    """

    effective_from = models.DateTimeField(unique=True)
    shard_count = models.PositiveIntegerField()
    reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["effective_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(shard_count__gte=1), name="shardcountschedule_count_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.shard_count} shards from {self.effective_from.isoformat()}"


class Bucket(models.Model):
    """A bucket's shard count, recorded by its first write and never changed."""

    start = models.DateTimeField(unique=True)
    shard_count = models.PositiveIntegerField()
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["start"]
        constraints = [
            models.CheckConstraint(condition=Q(shard_count__gte=1), name="bucket_count_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.start.isoformat()} ({self.shard_count} shards)"


class Job(models.Model):
    """A one-shot job due at ``due_at``, stored in partition ``(bucket, shard)``."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: ``job_team_due`` (team, due_at) serves team lookups, and
    # every index costs the bulk COPY (and each partition) another B-tree. No
    # database constraint either: its deferred check ran once per row at COMMIT
    # (~3 ms per 1,000-job batch, a tenth of the bulk path); jobs are only written
    # by the services for a Team they were given, and PROTECT (Django's collector)
    # still refuses to delete a team that has jobs.
    team = models.ForeignKey(
        Team, on_delete=models.PROTECT, related_name="jobs", db_index=False, db_constraint=False
    )
    # The time the client asked for; ``bucket`` may be later (late writes).
    due_at = models.DateTimeField()
    bucket = models.DateTimeField()
    shard = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING)
    target_kind = models.CharField(max_length=16, choices=TargetKind.choices)
    # A webhook URL or a registered handler name, by ``target_kind``.
    target = models.CharField(max_length=2048)
    payload = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 (NULL = no key; unique only when set)
    # sha256 of the canonical request body, to tell a replay from a conflict.
    request_fingerprint = models.CharField(max_length=64, blank=True)
    # The effective due_at was spread by id hash over this many seconds.
    window_seconds = models.PositiveIntegerField(default=0)
    # Past this instant the job ends as expired instead of firing late.
    expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # The last attempt, kept on the row (a first successful attempt writes no
    # DeliveryAttempt row: the history table holds the failed tries that matter).
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    # Plain integers: a CHECK on a new column would make PostgreSQL scan every row.
    last_attempt_ms = models.IntegerField(null=True, blank=True)
    last_status_code = models.SmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # An occurrence of a recurring schedule: which one, and the instant it stands for
    # (due_at may be later: the window's spread). No foreign key: a deleted schedule
    # leaves its delivered occurrences readable.
    schedule_id = models.UUIDField(null=True, blank=True)
    scheduled_for = models.DateTimeField(null=True, blank=True)
    # Flow control (``scheduling.flow``): the team's key whose limits this job obeys.
    flow_control_key = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001 (NULL = none)
    # What the job sends besides its payload, and what is heard after, where it differs
    # from the default webhook (``scheduling.jobs.requests``: method, header names and
    # their sealed values, body format, timeout, retry policy, callbacks). NULL for the
    # default: one column the pollers' read carries as NULL for most jobs.
    request = models.JSONField(null=True, blank=True)
    # The successful response, kept only where the job asked (``capture_response``):
    # status_code, content_type, a bounded body excerpt, duration_ms.
    response = models.JSONField(null=True, blank=True)
    # The W3C trace context the job was created in (``scheduling.tracing``): its
    # traceparent, then after a space its tracestate. NULL: none (tracing off and none sent).
    trace_context = models.TextField(null=True, blank=True)  # noqa: DJ001 (NULL = none)

    class Meta:
        # No unique key but the primary key: on PostgreSQL the table is partitioned
        # by ``bucket`` (migration 0005) and every unique key there must include it.
        # Idempotency keys live in IdempotencyKey; rows reach this table by id.
        indexes = [
            # The poller's read: an index range on one partition's pending rows.
            models.Index(
                fields=["bucket", "shard", "due_at"],
                condition=Q(status="pending"),
                name="job_pending_bucket_shard_due",
            ),
            models.Index(fields=["team", "due_at"], name="job_team_due"),
            # The console's deliveries per minute and per shard: a range on recent
            # deliveries, never a scan of every delivered row (bench/dashboard.py).
            models.Index(
                fields=["delivered_at", "shard", "due_at"],
                condition=Q(status="delivered"),
                name="job_delivered_at",
            ),
            # The dead letters an operator requeues from the admin: few rows, written
            # only when a job dies or is requeued, never on the delivery hot path.
            models.Index(
                fields=["due_at"],
                condition=Q(status__in=["dead", "expired"]),
                name="job_dead_due",
            ),
            # A schedule's occurrences: the ``schedule_id=`` filter, pause and delete.
            # Partial: one-shot jobs (most rows) carry no entry.
            models.Index(
                fields=["schedule_id", "due_at"],
                condition=Q(schedule_id__isnull=False),
                name="job_schedule_due",
            ),
            # A key's waiting jobs in due order (the pollers' reads of a held key, the
            # console's waiting counts). Partial: jobs without a key carry no entry.
            models.Index(
                fields=["team", "flow_control_key", "due_at"],
                condition=Q(status="pending", flow_control_key__isnull=False),
                name="job_pending_flow_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"


class InFlightBatch(models.Model):
    """A batch of jobs a poller has read and handed to its sinks, not yet written back.

    The lease is the lock: a shard's owner reads its due pending rows without
    changing them and records one of these per batch (``polling.reading.take.batch_take``),
    then writes each job once, when its outcome is known. Cancel and reschedule
    consult it to answer 409 for a job in flight (``scheduling.jobs.inflight``). Rows of
    an epoch no longer current are deleted by the shard's next owner.
    """

    shard = models.PositiveIntegerField()
    epoch = models.BigIntegerField()
    owner = models.CharField(max_length=200)
    # The batch's job ids as 32-digit hex, comma-separated: a substring test finds an
    # id exactly (hex has no comma), on PostgreSQL and SQLite alike.
    job_ids = models.TextField()
    job_count = models.PositiveIntegerField()
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["shard", "epoch"], name="inflightbatch_shard_epoch")]

    def __str__(self) -> str:
        return f"shard {self.shard} epoch {self.epoch}: {self.job_count} jobs"


class IdempotencyKey(models.Model):
    """A team's idempotency key and the job it created: unique per team.

    Kept apart from the jobs table, which is partitioned by bucket on PostgreSQL
    (a unique key there would have to include the bucket, and a rescheduled job
    changes bucket). ``job_id`` carries no foreign key for the same reason.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="idempotency_keys")
    key = models.CharField(max_length=255)
    job_id = models.UUIDField()
    # sha256 of the canonical request body, to tell a replay from a conflict.
    fingerprint = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "key"], name="idempotencykey_team_key_uniq"),
        ]
        indexes = [models.Index(fields=["job_id"], name="idempotencykey_job")]

    def __str__(self) -> str:
        return f"{self.team_id}:{self.key} -> {self.job_id}"


class ApiKey(models.Model):
    """A team's API key. Only a hash is stored; the key is shown once, at creation.

    A key reads ``sl_<prefix>_<secret>``: the prefix finds the row by index, the
    sha256 of the whole key proves it. Keys carry 256 random bits, so a fast hash
    is as safe as a slow one and keeps authentication off the request's hot path.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"
        ordering = ["team", "-created_at"]

    def __str__(self) -> str:
        return f"{self.team.slug}: sl_{self.prefix}_…"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None


class DeliveryAttempt(models.Model):
    """One try at delivering a job: when, how long, and what came back."""

    # No database constraint: a foreign key to the partitioned jobs table would need
    # a unique key on (id, bucket). Django cascades deletes; retention prunes rows.
    # No index of its own: ``deliveryattempt_job_attempt`` (job, attempt) serves lookups
    # by job, and a second B-tree on a random UUID costs every batch's write-back.
    job = models.ForeignKey(
        Job,
        on_delete=models.CASCADE,
        related_name="delivery_attempts",
        db_constraint=False,
        db_index=False,
    )
    attempt = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    result = models.CharField(max_length=16)  # delivered | retry | dead | expired
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)
    poller = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["job", "attempt"]
        indexes = [models.Index(fields=["job", "attempt"], name="deliveryattempt_job_attempt")]

    def __str__(self) -> str:
        return f"{self.job_id} #{self.attempt} {self.result}"


class TaskRun(models.Model):
    """What a Django task (django.tasks) scheduled through sendlater returned or raised."""

    job = models.OneToOneField(
        Job,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="task_run",
        db_constraint=False,  # see DeliveryAttempt.job
    )
    task_path = models.CharField(max_length=300)
    return_value = models.JSONField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)  # [{"exception_class_path", "traceback"}]
    worker_ids = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.task_path} ({self.job_id})"


class ThrottleCounter(models.Model):
    """A request budget's counter for the current window (``scheduling.api.access.ratelimit``).

    One row per (scope, team): a request counts in one ``INSERT ... ON CONFLICT DO
    UPDATE ... RETURNING`` that starts the row anew when the window has moved on, so
    the table holds one small row per team and scope and every worker counts exactly.
    """

    key = models.CharField(max_length=200, primary_key=True)
    window_end = models.BigIntegerField()  # unix seconds
    count = models.IntegerField()

    class Meta:
        verbose_name = "throttle counter"

    def __str__(self) -> str:
        return f"{self.key}: {self.count} until {self.window_end}"


# Models of their own modules, registered (and importable) here.
from scheduling.flow.models import FlowControl, FlowSlot  # noqa: E402, F401
from scheduling.schedules.models import (  # noqa: E402, F401
    MissedPolicy,
    Schedule,
    ScheduleOccurrence,
)
from scheduling.topics.models import NAME_PATTERN as TOPIC_NAME_PATTERN  # noqa: E402, F401
from scheduling.topics.models import Topic, TopicEndpoint  # noqa: E402, F401
