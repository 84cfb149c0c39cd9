"""Recurring schedules' rows: the schedule and its ledger of materialized instants
(``scheduling.schedules.services`` writes them, ``polling.upkeep.schedules`` plans from them)."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from scheduling.choices import TargetKind


class MissedPolicy(models.TextChoices):
    SKIP = "skip"
    FIRE_LAST = "fire_last"


class Schedule(models.Model):
    """A recurring schedule: ``cron`` in ``timezone`` or ``every_seconds``; each
    occurrence becomes an ordinary Job, materialized ahead by the pollers.

    ``next_at`` is the materialization cursor: the first instant not yet turned into
    a job (None: no more instants). It only moves forward, by a compare-and-set on
    ``(next_at, version)`` fenced on the lease of the schedule's shard
    (``shard_of(id)``, the public hash of the id, as for jobs); every change through
    the API bumps ``version`` so a planner that read the old row writes nothing.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey("scheduling.Team", on_delete=models.CASCADE, related_name="schedules")
    cron = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001 (NULL = interval)
    every_seconds = models.PositiveIntegerField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    target_kind = models.CharField(max_length=16, choices=TargetKind.choices)
    target = models.CharField(max_length=2048)
    payload = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    window_seconds = models.PositiveIntegerField(default=0)
    expires_after_seconds = models.PositiveIntegerField(null=True, blank=True)
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    # every_seconds counts from here (start_at, or the creation time).
    anchor_at = models.DateTimeField()
    missed = models.CharField(max_length=16, choices=MissedPolicy.choices, default="skip")
    paused = models.BooleanField(default=False)
    # Copied to every occurrence (``Job.flow_control_key``).
    flow_control_key = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001 (NULL = none)
    # Copied to every occurrence (``Job.request``: the delivery contract, headers sealed).
    request = models.JSONField(null=True, blank=True)
    # The W3C trace context the schedule was created in (``scheduling.tracing``): each
    # occurrence starts a trace of its own linked to it (docs/schedules.md).
    trace_context = models.TextField(null=True, blank=True)  # noqa: DJ001 (NULL = none)
    # mmh3.hash(str(id), signed=False): the shard is this modulo the shard indices in use.
    shard_hash = models.BigIntegerField()
    next_at = models.DateTimeField(null=True, blank=True)
    version = models.BigIntegerField(default=1)
    # The ledger floor: no plan writes an instant before it (the cursor's
    # compare-and-set checks it), so the ledger rows before it can go (upkeep prunes
    # them, ``polling.upkeep.ledger_prune``). Only the planner moves it, never back.
    ledger_floor = models.DateTimeField(null=True, blank=True)
    # The latest instant materialized (the admin's "last planned").
    last_occurrence_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            # The planner's read: active schedules whose next instant is near.
            models.Index(
                fields=["next_at"],
                condition=Q(paused=False, next_at__isnull=False),
                name="schedule_due",
            ),
            models.Index(fields=["team", "created_at", "id"], name="schedule_team_created"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=(Q(cron__isnull=False) & Q(every_seconds__isnull=True))
                | (Q(cron__isnull=True) & Q(every_seconds__gte=5)),
                name="schedule_cron_xor_every",
            ),
        ]

    def __str__(self) -> str:
        rule = f"cron {self.cron} {self.timezone}" if self.cron else f"every {self.every_seconds}s"
        return f"{self.id} ({rule})"


class ScheduleOccurrence(models.Model):
    """The ledger: one row per (schedule, instant) materialized at or after the
    schedule's ``ledger_floor``, and its job (rows before the floor are pruned).

    Its unique key makes materialization idempotent: the planner inserts ledger rows
    with ON CONFLICT DO NOTHING and writes a job only for the rows it inserted. Kept
    apart from the jobs table, which is partitioned by bucket on PostgreSQL (a unique
    key there would have to include the bucket). No foreign keys, as IdempotencyKey.
    """

    # The unique key is the primary key: one B-tree per ledger row, not two (the
    # planner writes tens of thousands a second). ``job_id`` needs no index: rows are
    # found by schedule and instant.
    pk = models.CompositePrimaryKey("schedule_id", "scheduled_for")
    schedule_id = models.UUIDField()
    scheduled_for = models.DateTimeField()
    job_id = models.UUIDField()

    def __str__(self) -> str:
        return f"{self.schedule_id}@{self.scheduled_for.isoformat()} -> {self.job_id}"
