"""The jobs changelist: index-served search and filters, estimated counts; read-only rows.

It must stay fast with ten million jobs, so it offers only what an index serves:
search by id (primary key), idempotency key (the per-team unique index, probed
for every team), team slug (``job_team_due``) and ``key=value`` metadata (the GIN
index on PostgreSQL); filters by status and due range (a due range also bounds
``bucket``, which the pending index and bucket partitions lead with). No
``date_hierarchy`` (its date list aggregates the whole table) and no exact
counts of large results (see ``scheduling.console.paginators``).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from scheduling import conf, keys
from scheduling.console.paginators import EstimatedCountPaginator
from scheduling.console.readonly import ReadOnlyAdmin
from scheduling.jobs.selectors import job_filter_metadata
from scheduling.models import Job, Team
from scheduling.sharding.clock import db_now

HOUR = timedelta(hours=1)
DUE_RANGES = {
    "overdue": ("Due already (past 7 days)", -7 * 24 * HOUR, timedelta(0)),
    "past-hour": ("Due in the past hour", -HOUR, timedelta(0)),
    "next-hour": ("Due in the next hour", timedelta(0), HOUR),
    "next-day": ("Due in the next 24 hours", timedelta(0), 24 * HOUR),
    "next-week": ("Due in the next 7 days", timedelta(0), 7 * 24 * HOUR),
}


class DueRangeFilter(admin.SimpleListFilter):
    """Due-time windows around now; each also bounds ``bucket`` from below."""

    title = "due"
    parameter_name = "due"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(key, label) for key, (label, _, _) in DUE_RANGES.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        window = DUE_RANGES.get(self.value() or "")
        if window is None:
            return queryset
        now = db_now()
        low, high = now + window[1], now + window[2]
        # A job's bucket is never before its due time's bucket (late writes only
        # move it later), so this bound is exact and lets the index range start there.
        return queryset.filter(
            due_at__gte=low,
            due_at__lt=high,
            bucket__gte=keys.bucket_of(low, conf.bucket_seconds()),
        )


def job_search(queryset: QuerySet[Job], term: str) -> QuerySet[Job]:
    """One search box, index-served forms only (see the module docstring)."""
    term = term.strip()
    if not term:
        return queryset
    try:
        return queryset.filter(id=uuid.UUID(term))
    except ValueError:
        pass
    if "=" in term:
        key, _, value = term.partition("=")
        return job_filter_metadata(queryset, {key.strip(): value.strip()})
    if term.startswith("team:"):
        return queryset.filter(team__slug=term.removeprefix("team:").strip())
    # The unique index leads with team: probe it once per team (teams are few).
    team_ids = list(Team.objects.values_list("id", flat=True))
    match = Q(team_id__in=team_ids, idempotency_key=term)
    team_id = Team.objects.filter(slug=term).values_list("id", flat=True).first()
    if team_id is not None:
        match |= Q(team_id=team_id)
    return queryset.filter(match)


class JobAdmin(ReadOnlyAdmin):
    """Read-only rows: a job changes only through the services (cancel, fire now,
    reschedule, requeue: the console's actions, polling.console.jobs) and is never
    deleted by hand (retention drops it with its partition)."""

    list_display = ["id", "team", "status", "due_at", "bucket", "shard", "attempts", "target"]
    list_filter = ["status", DueRangeFilter, "team"]
    # The search itself is job_search; a non-empty list shows the search box.
    search_fields = ["=id"]
    search_help_text = "Job id, idempotency key, team slug (or team:slug), or metadata key=value."
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    list_select_related = ["team"]
    # Sorting ten million rows by an unindexed column is a full scan: only due_at.
    sortable_by = ["due_at"]

    def get_search_results(self, request, queryset, search_term):  # type: ignore[no-untyped-def]
        return job_search(queryset, search_term), False
