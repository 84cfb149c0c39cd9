"""The recurring schedules in the admin: a read-mostly list, pause and resume as actions.

Registered by ``polling.admin``: the actions share the console's confirmation page
and audit entry (``polling.console.actions``), and scheduling never imports polling.
Pause and resume call the scheduling services, which cancel pending occurrences and
bump the schedule's version (a planner that read it before writes nothing); nothing
here updates a schedule row itself.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.urls import reverse

from polling.console.actions import _confirm_or_run
from scheduling.jobs.requests import request_public
from scheduling.models import Job, JobStatus, Schedule
from scheduling.schedules import services as schedules
from scheduling.sharding.clock import db_now

SCHEDULE_ACTIONS = {"pause_schedules", "resume_schedules"}


def can_change_schedules(user: Any) -> bool:
    return user.is_active and user.has_perm("scheduling.change_schedule")


def _line(schedule: Schedule) -> str:
    state = "paused" if schedule.paused else "active"
    return (
        f"schedule {schedule.id} ({schedule_rule_text(schedule)}, team {schedule.team_id}, {state})"
    )


def schedule_rule_text(schedule: Schedule) -> str:
    if schedule.cron:
        return f"cron {schedule.cron} {schedule.timezone}"
    return f"every {schedule.every_seconds}s"


def _done_url() -> str:
    return reverse("admin:scheduling_schedule_changelist")


@admin.action(description="Pause selected schedules (cancels pending occurrences)…")
def pause_schedules(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> Any:
    def run(schedule: Schedule, data: dict[str, Any]) -> str | None:
        if schedule.paused:
            return None
        schedules.schedule_pause(team=schedule.team, schedule_id=schedule.id)
        return f"Paused schedule {schedule.id}."

    return _confirm_or_run(
        modeladmin,
        request,
        queryset.select_related("team").order_by("created_at", "id"),
        action="pause_schedules",
        title="Pause schedules",
        describe=_line,
        run=run,
        allowed=can_change_schedules,
        done_url=_done_url(),
    )


@admin.action(description="Resume selected schedules (missed ones follow their policy)…")
def resume_schedules(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> Any:
    def run(schedule: Schedule, data: dict[str, Any]) -> str | None:
        if not schedule.paused:
            return None
        schedules.schedule_resume(team=schedule.team, schedule_id=schedule.id)
        return f"Resumed schedule {schedule.id} (missed: {schedule.missed})."

    return _confirm_or_run(
        modeladmin,
        request,
        queryset.select_related("team").order_by("created_at", "id"),
        action="resume_schedules",
        title="Resume schedules",
        describe=_line,
        run=run,
        allowed=can_change_schedules,
        done_url=_done_url(),
    )


class ScheduleAdmin(admin.ModelAdmin):
    """Schedules with their next occurrence, last delivered occurrence and state."""

    list_display = [
        "id",
        "team",
        "rule",
        "target",
        "paused",
        "next_occurrence",
        "last_delivered",
        "created_at",
    ]
    list_filter = ["paused", "team"]
    search_fields = ["=id", "cron", "target"]
    list_select_related = ["team"]
    ordering = ["-created_at"]
    actions = [pause_schedules, resume_schedules]
    # The delivery contract is shown masked (header values never leave the database
    # decrypted) and changed through the API only.
    exclude = ["request"]
    readonly_fields = ["delivery"]

    @admin.display(description="delivery (header values masked)")
    def delivery(self, schedule: Schedule) -> str:
        shown = request_public(schedule.request)
        shown.pop("callbacks", None)
        return json.dumps(shown, sort_keys=True)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        # One subquery per page, served by the partial index job_schedule_due.
        delivered = Job.objects.filter(
            schedule_id=OuterRef("id"), status=JobStatus.DELIVERED
        ).order_by("-scheduled_for")
        return (
            super()
            .get_queryset(request)
            .annotate(last_delivered_for=Subquery(delivered.values("scheduled_for")[:1]))
        )

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        self._now = db_now()  # one clock read for the page's next occurrences
        return super().changelist_view(request, extra_context)

    @admin.display(description="rule")
    def rule(self, schedule: Schedule) -> str:
        return schedule_rule_text(schedule)

    @admin.display(description="next occurrence")
    def next_occurrence(self, schedule: Schedule) -> datetime | None:
        if schedule.paused:
            return None
        now = getattr(self, "_now", None) or db_now()
        found = schedules.schedule_occurrences(schedule=schedule, count=1, now=now)
        return found[0] if found else None

    @admin.display(description="last delivered", ordering="last_delivered_for")
    def last_delivered(self, schedule: Schedule) -> datetime | None:
        return getattr(schedule, "last_delivered_for", None)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # schedules are created through the API (a team's key)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Viewing and the actions only: edits go through the API's re-planning.
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
