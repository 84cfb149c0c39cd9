"""Recurring schedules: writes (create, update, pause, resume, delete) and reads.

A schedule never delivers anything itself: the pollers turn each occurrence into an
ordinary job ahead of time (``polling.upkeep.schedules``), idempotently per (schedule,
instant) through the ``ScheduleOccurrence`` ledger. Here the API's changes move the
planning cursor (``next_at``) and bump ``version``, so a planner that read the row
before the change writes nothing (its compare-and-set fails).

Missed occurrences (paused, outage, a past ``start_at``) are those before ``now``
when the planner reaches them: ``skip`` fires none, ``fire_last`` the latest once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet

from scheduling import keys, tracing
from scheduling.errors import ScheduleNotFound, SchedulingError
from scheduling.jobs.inflight import id_not_in, in_flight_frozen
from scheduling.jobs.requests import DeliveryRequest, request_merged, request_stored
from scheduling.jobs.specs import JobSpec, SpecChecker
from scheduling.models import MissedPolicy, Schedule, ScheduleOccurrence, Team
from scheduling.schedules import recurrence
from scheduling.sharding.clock import db_now, iso_utc

MAX_PREVIEW = 100
NEXT_OCCURRENCES = 5
SCHEDULE_LIST_ORDER = ("created_at", "id")


@dataclass
class ScheduleSpec:
    """What a client asks for: a recurrence, a target and the jobs' shape."""

    target_kind: str
    target: str
    cron: str | None = None
    every_seconds: int | None = None
    timezone: str = "UTC"
    payload: Any = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    window_seconds: int = 0
    expires_after_seconds: int | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    missed: str = MissedPolicy.SKIP
    flow_control_key: str | None = None  # copied to every occurrence
    # The delivery contract, copied to every occurrence (``Job.request``).
    request: DeliveryRequest | None = None
    # The W3C trace context the schedule keeps: each occurrence's trace links to it
    # (None: the current span's with tracing on, else none).
    trace_context: str | None = None


def _request_given(value: Any) -> DeliveryRequest | None:
    """A request to check: a new one; a stored one (a dict) was checked when written."""
    return value if isinstance(value, DeliveryRequest) else None


def _check(values: dict[str, Any], now: datetime) -> None:
    """Raise a SchedulingError naming the field if the schedule cannot be kept."""
    cron, every = values.get("cron"), values.get("every_seconds")
    if (cron is None) == (every is None):
        raise SchedulingError("give exactly one of cron and every_seconds.", field="cron")
    try:
        if cron is not None:
            recurrence.validate_cron(cron)
        recurrence.zone(values["timezone"])
    except recurrence.RecurrenceError as error:
        raise SchedulingError(error.message, field=error.field) from error
    if every is not None and every < recurrence.MIN_EVERY_SECONDS:
        raise SchedulingError(
            f"every_seconds must be at least {recurrence.MIN_EVERY_SECONDS}.",
            field="every_seconds",
        )
    start_at, end_at = values.get("start_at"), values.get("end_at")
    if start_at is not None and end_at is not None and end_at <= start_at:
        # Both inclusive: end_at == start_at would be one instant at most; a range that
        # holds none is a client's mistake, not a schedule.
        raise SchedulingError(
            f"end_at must be after start_at ({iso_utc(start_at)}).", field="end_at"
        )
    if values.get("missed") not in MissedPolicy.values:
        raise SchedulingError("missed must be 'skip' or 'fire_last'.", field="missed")
    # The jobs' own checks (target, payload, metadata, window, expiry): a job due now.
    SpecChecker(now).check(
        JobSpec(
            due_at=now,
            target_kind=values["target_kind"],
            target=values["target"],
            payload=values["payload"],
            metadata=values["metadata"],
            window_seconds=values["window_seconds"],
            expires_after_seconds=values["expires_after_seconds"],
            flow_control_key=values.get("flow_control_key"),
            request=_request_given(values.get("request")),
        )
    )


def schedule_rule(schedule: Schedule) -> recurrence.Rule:
    return recurrence.Rule(
        cron=schedule.cron,
        every_seconds=schedule.every_seconds,
        timezone=schedule.timezone,
        anchor=schedule.anchor_at,
        start_at=schedule.start_at,
        end_at=schedule.end_at,
    )


def _first_instant(schedule: Schedule, moment: datetime) -> datetime | None:
    return next(schedule_rule(schedule).after(moment), None)


def _ceil_second(moment: datetime) -> datetime:
    if moment.microsecond:
        return moment.replace(microsecond=0) + timedelta(seconds=1)
    return moment


def schedule_create(*, team: Team, spec: ScheduleSpec, now: datetime | None = None) -> Schedule:
    """Create a schedule; its first instant is planned by the pollers.

    ``every_seconds`` counts from ``start_at``, or from creation (rounded up to a
    whole second: the first occurrence fires then). A past ``start_at`` leaves the
    instants since then to the missed policy.
    """
    now = now or db_now()
    values = vars(spec).copy()
    _check(values, now)
    values["request"] = request_stored(spec.request)
    if values["trace_context"] is None:
        values["trace_context"] = tracing.context_new("sendlater.schedules.create")
    schedule_id = uuid.uuid4()
    schedule = Schedule(
        id=schedule_id,
        team=team,
        shard_hash=keys.shard_of(schedule_id, 2**32),
        anchor_at=spec.start_at or _ceil_second(now),
        created_at=now,
        updated_at=now,
        **values,
    )
    schedule.next_at = _first_instant(schedule, spec.start_at or now)
    schedule.save(force_insert=True)
    return schedule


# Pending occurrences of one schedule, canceled in one statement (PostgreSQL and
# SQLite both return the rows). Jobs in flight are left out, with every shard's
# window lock held (``scheduling.jobs.inflight``), and the UPDATE re-checks the status
# of each row it locks, so none is both canceled and delivered.
CANCEL_OCCURRENCES_SQL = """
UPDATE scheduling_job SET status = 'canceled', updated_at = %s
WHERE schedule_id = %s AND status = 'pending' {since}{busy}
RETURNING id, scheduled_for
"""


def _cancel_pending(schedule: Schedule, now: datetime, since: datetime | None) -> list[datetime]:
    """Cancel the schedule's pending occurrences (scheduled at or after ``since``, if
    given) and forget them in the ledger so the instants may be planned again.
    Return their instants."""
    ops = connection.ops
    busy, busy_params = id_not_in("id", in_flight_frozen())
    sql = CANCEL_OCCURRENCES_SQL.format(since="AND scheduled_for >= %s" if since else "", busy=busy)
    schedule_key = schedule.id if connection.vendor == "postgresql" else schedule.id.hex
    params: list[Any] = [ops.adapt_datetimefield_value(now), schedule_key]
    if since:
        params.append(ops.adapt_datetimefield_value(since))
    params.extend(busy_params)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if not rows:
        return []
    instants = [_aware(row[1]) for row in rows if row[1] is not None]
    ScheduleOccurrence.objects.filter(schedule_id=schedule.id, scheduled_for__in=instants).delete()
    return instants


def _aware(value: Any) -> datetime:
    """A datetime read back from a raw cursor (SQLite: naive UTC text)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _locked(team: Team, schedule_id: uuid.UUID | str) -> Schedule:
    schedule = Schedule.objects.select_for_update().filter(team=team, id=schedule_id).first()
    if schedule is None:
        raise ScheduleNotFound(f"schedule {schedule_id} does not exist.", field="id")
    return schedule


def schedule_pause(
    *, team: Team, schedule_id: uuid.UUID | str, now: datetime | None = None
) -> Schedule:
    """Pause: no more occurrences are planned; the pending ones not in flight are canceled.

    The cursor goes back to the earliest canceled instant, so a resume finds the
    instants missed while paused (and applies the missed policy to them).
    """
    now = now or db_now()
    with transaction.atomic():
        schedule = _locked(team, schedule_id)
        if schedule.paused:
            return schedule
        canceled = _cancel_pending(schedule, now, since=None)
        if canceled and (schedule.next_at is None or min(canceled) < schedule.next_at):
            schedule.next_at = min(canceled)
        schedule.paused = True
        schedule.version += 1
        schedule.updated_at = now
        schedule.save(update_fields=["paused", "next_at", "version", "updated_at"])
    return schedule


def schedule_resume(
    *, team: Team, schedule_id: uuid.UUID | str, now: datetime | None = None
) -> Schedule:
    """Resume a paused schedule: instants missed meanwhile follow the missed policy."""
    now = now or db_now()
    with transaction.atomic():
        schedule = _locked(team, schedule_id)
        if not schedule.paused:
            return schedule
        schedule.paused = False
        schedule.version += 1
        schedule.updated_at = now
        schedule.save(update_fields=["paused", "version", "updated_at"])
    return schedule


UPDATABLE = frozenset(
    {
        "cron",
        "every_seconds",
        "timezone",
        "target_kind",
        "target",
        "payload",
        "metadata",
        "window_seconds",
        "expires_after_seconds",
        "start_at",
        "end_at",
        "missed",
        "flow_control_key",
        "request",
    }
)


def schedule_update(
    *,
    team: Team,
    schedule_id: uuid.UUID | str,
    changes: dict[str, Any],
    now: datetime | None = None,
) -> Schedule:
    """Change a schedule and re-plan its future: pending occurrences at or after now are
    canceled and planned again under the new rule (an instant already delivered or in
    flight keeps its ledger row, so it never fires twice). Overdue ones still fire.
    ``changes["request"]``: the delivery contract's changed fields (API names), merged
    over the schedule's.
    """
    unknown = set(changes) - UPDATABLE
    if unknown:
        raise SchedulingError("unknown field.", field=sorted(unknown)[0])
    now = now or db_now()
    with transaction.atomic():
        schedule = _locked(team, schedule_id)
        values = {name: getattr(schedule, name) for name in UPDATABLE}
        values.update(changes)
        if "request" in changes:
            values["request"] = request_merged(schedule.request, changes["request"])
        # Giving one kind of rule replaces the other.
        if changes.get("cron") is not None and "every_seconds" not in changes:
            values["every_seconds"] = None
        if changes.get("every_seconds") is not None and "cron" not in changes:
            values["cron"] = None
        _check(values, now)
        if isinstance(values["request"], DeliveryRequest):
            values["request"] = request_stored(values["request"])
        rule_changed = any(
            values[name] != getattr(schedule, name)
            for name in ("cron", "every_seconds", "start_at")
        )
        for name, value in values.items():
            setattr(schedule, name, value)
        if rule_changed and schedule.every_seconds is not None:
            schedule.anchor_at = schedule.start_at or _ceil_second(now)
        _cancel_pending(schedule, now, since=now)
        schedule.next_at = _first_instant(schedule, max(now, schedule.start_at or now))
        schedule.version += 1
        schedule.updated_at = now
        schedule.save()
    return schedule


def schedule_delete(
    *, team: Team, schedule_id: uuid.UUID | str, now: datetime | None = None
) -> None:
    """Delete a schedule: its pending occurrences not in flight are canceled; the jobs
    it already made stay readable (with their ``schedule_id``)."""
    now = now or db_now()
    with transaction.atomic():
        schedule = _locked(team, schedule_id)
        _cancel_pending(schedule, now, since=None)
        ScheduleOccurrence.objects.filter(schedule_id=schedule.id).delete()
        schedule.delete()


# --- reads --------------------------------------------------------------------


def schedule_get(*, team: Team, schedule_id: uuid.UUID | str) -> Schedule:
    schedule = Schedule.objects.filter(team=team, id=schedule_id).first()
    if schedule is None:
        raise ScheduleNotFound(f"schedule {schedule_id} does not exist.", field="id")
    return schedule


def schedule_list(
    *, team: Team, after: tuple[datetime, uuid.UUID] | None = None
) -> QuerySet[Schedule]:
    """The team's schedules, oldest first; ``after`` is the keyset of the previous page."""
    schedules = Schedule.objects.filter(team=team)
    if after is not None:
        created_at, schedule_id = after
        schedules = schedules.filter(
            Q(created_at__gt=created_at) | Q(created_at=created_at, id__gt=schedule_id)
        )
    return schedules.order_by(*SCHEDULE_LIST_ORDER)


def schedule_occurrences(
    *, schedule: Schedule, count: int, now: datetime | None = None
) -> list[datetime]:
    """The next ``count`` instants (UTC) from now, whatever has been planned yet."""
    if not 1 <= count <= MAX_PREVIEW:
        raise SchedulingError(f"count must lie in 1..{MAX_PREVIEW}.", field="count")
    now = now or db_now()
    rule = schedule_rule(schedule)
    return recurrence.next_instants(rule, max(now, schedule.start_at or now), count)
