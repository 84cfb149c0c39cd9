"""Jobs in the admin: the console's own actions through the confirmation page, and the
compact job page (status, due time, target, attempts as a timeline).

Registered by ``polling.admin``, like the schedules: the actions share the console's
confirmation page and audit entry (``polling.console.actions``), and scheduling never
imports polling. Cancel, fire now, reschedule and requeue each call a scheduling
service, with its lock order and its checks (a job in flight is refused, not raced);
nothing here writes a job row. Jobs are never deleted by hand: retention drops them
with their partition, and a team may ask about a job's history until then.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import ActionLocation
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from polling.console.actions import ConfirmForm, _confirm_or_run
from polling.writing.callbacks import CALLBACK_OF
from scheduling.console.jobs import JobAdmin
from scheduling.errors import SchedulingError
from scheduling.jobs.deadletters import job_requeue
from scheduling.jobs.requests import request_public
from scheduling.jobs.services import job_cancel, job_reschedule
from scheduling.models import Job, JobStatus
from scheduling.sharding.clock import db_now, iso_utc

# One confirmation page, one service call per job: a selection "across all pages" of
# a ten-million-row list is refused rather than walked.
MAX_JOBS_PER_ACTION = 1000
# The job page's buttons post Django's change-form action field (its form prefix, then
# "-action"); the confirmation page carries it, so the confirmed POST returns there too.
JOB_PAGE_ACTION = f"{ActionLocation.CHANGE_FORM.value}-action"
BOTH_PAGES = [ActionLocation.CHANGE_LIST, ActionLocation.CHANGE_FORM]
TIMELINE_ATTEMPTS = 50  # the latest ones; the history of a job retried for days is long
PAYLOAD_PREVIEW_CHARS = 20_000


def can_operate_jobs(user: Any) -> bool:
    return bool(user.is_active and user.has_perm("scheduling.change_job"))


class RescheduleForm(ConfirmForm):
    due_at = forms.DateTimeField(
        label="New due time (UTC)",
        help_text="ISO 8601, e.g. 2027-01-01T09:00Z: the job moves to that time's bucket.",
    )
    field_order = ["due_at", "reason"]


def _seen(job: Job) -> str:
    """What the operator saw: a job changed since (by its team, or delivered) is skipped."""
    return f"{job.status}@{iso_utc(job.due_at)}"


def _line(job: Job) -> str:
    return (
        f"job {job.id} of team {job.team.slug}: {job.status}, due {iso_utc(job.due_at)}, "
        f"{job.target_kind} {job.target[:100]}, {job.attempts} attempt(s)"
    )


def _run_per_job(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet[Job],
    *,
    action: str,
    title: str,
    intro: str,
    service: Callable[[Job, dict[str, Any]], str],
    form_class: type[ConfirmForm] | None = None,
) -> HttpResponse | None:
    jobs = queryset.select_related("team").order_by("due_at", "id")
    if len(jobs[: MAX_JOBS_PER_ACTION + 1]) > MAX_JOBS_PER_ACTION:
        modeladmin.message_user(
            request,
            f"{title}: select at most {MAX_JOBS_PER_ACTION} jobs at a time "
            "(narrow the list with a filter or a search).",
            messages.ERROR,
        )
        return None

    def run(job: Job, data: dict[str, Any]) -> str | None:
        if data.get("seen") != _seen(job):
            return None
        try:
            return service(job, data)
        except SchedulingError as error:
            modeladmin.message_user(request, f"Job {job.id}: {error.message}", messages.WARNING)
            return None

    from_job_page = JOB_PAGE_ACTION in request.POST
    selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
    if from_job_page and len(selected) == 1:
        done_url = reverse("admin:scheduling_job_change", args=[selected[0]])
    else:
        done_url = reverse("admin:scheduling_job_changelist")
    return _confirm_or_run(
        modeladmin,
        request,
        jobs,
        action=action,
        title=title,
        describe=_line,
        run=run,
        hidden=_seen,
        allowed=can_operate_jobs,
        done_url=done_url,
        form_class=form_class,
        intro=intro,
        keep={JOB_PAGE_ACTION: action} if from_job_page else None,
    )


def _cancel(job: Job, data: dict[str, Any]) -> str:
    job_cancel(team=job.team, job_id=job.id)
    return f"Canceled job {job.id} (was due {iso_utc(job.due_at)})."


def _fire(job: Job, data: dict[str, Any]) -> str:
    # The open bucket and its shard: the owner of that shard delivers it next.
    job_reschedule(team=job.team, job_id=job.id, due_at=db_now())
    return f"Fired job {job.id} now (was due {iso_utc(job.due_at)})."


def _reschedule(job: Job, data: dict[str, Any]) -> str:
    moved = job_reschedule(team=job.team, job_id=job.id, due_at=data["due_at"])
    return f"Rescheduled job {job.id} to {iso_utc(moved.due_at)} (was {iso_utc(job.due_at)})."


def _requeue(job: Job, data: dict[str, Any]) -> str:
    job_requeue(team=job.team, job_id=job.id)
    return (
        f"Requeued job {job.id} ({job.status} after {job.attempts} attempt(s)): "
        "a new attempt series, due now."
    )


_PENDING_ONLY = "Only pending jobs change; others are skipped, and each refusal is shown."


def _job_action(
    name: str,
    *,
    description: str,
    title: str,
    intro: str,
    service: Callable[[Job, dict[str, Any]], str],
    form_class: type[ConfirmForm] | None = None,
) -> Callable[..., Any]:
    """An admin action named ``name`` (list and job page) that runs ``service`` per job
    after the confirmation page."""

    def action(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> Any:
        return _run_per_job(
            modeladmin,
            request,
            queryset,
            action=name,
            title=title,
            intro=intro,
            service=service,
            form_class=form_class,
        )

    action.__name__ = name
    return admin.action(description=description, permissions=["operate"], location=BOTH_PAGES)(
        action
    )


cancel_jobs = _job_action(
    "cancel_jobs",
    description="Cancel selected pending jobs…",
    title="Cancel jobs",
    intro="Cancel these jobs: they stay readable as canceled and are never delivered. "
    + _PENDING_ONLY,
    service=_cancel,
)
fire_now = _job_action(
    "fire_now",
    description="Fire selected pending jobs now…",
    title="Fire jobs now",
    intro="Make these jobs due now: the pollers deliver them within a poll interval. "
    + _PENDING_ONLY,
    service=_fire,
)
reschedule_jobs = _job_action(
    "reschedule_jobs",
    description="Reschedule selected pending jobs…",
    title="Reschedule jobs",
    intro="Move these jobs to a new due time (within the horizon). " + _PENDING_ONLY,
    service=_reschedule,
    form_class=RescheduleForm,
)
requeue_jobs = _job_action(
    "requeue_jobs",
    description="Requeue selected dead or expired jobs (new attempt series, due now)…",
    title="Requeue jobs",
    intro="Give these dead or expired jobs a new attempt series, due now. "
    "Other jobs are skipped, and each refusal is shown.",
    service=_requeue,
)


# Which of the actions a job's page offers, by its status.
PAGE_ACTIONS = {
    JobStatus.PENDING: [
        ("fire_now", "Fire now"),
        ("reschedule_jobs", "Reschedule…"),
        ("cancel_jobs", "Cancel…"),
    ],
    JobStatus.DEAD: [("requeue_jobs", "Requeue…")],
    JobStatus.EXPIRED: [("requeue_jobs", "Requeue…")],
}


class ConsoleJobAdmin(JobAdmin):
    """The jobs list (scheduling.console.jobs) with the console's actions and job page."""

    actions = [cancel_jobs, fire_now, reschedule_jobs, requeue_jobs]
    change_form_template = "admin/console/job_page.html"

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return can_operate_jobs(request.user)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        job = self.get_object(request, object_id)
        if job is not None:
            extra_context = {**(extra_context or {}), **self._page_context(request, job)}
        return super().change_view(request, object_id, form_url, extra_context)

    def _page_context(self, request: HttpRequest, job: Job) -> dict[str, Any]:
        # By time: a requeued job numbers its new series from 1 again.
        rows = job.delivery_attempts.order_by("-started_at", "-attempt")
        attempts = list(rows[:TIMELINE_ATTEMPTS])
        older = rows.count() - len(attempts) if len(attempts) == TIMELINE_ATTEMPTS else 0
        payload = json.dumps(job.payload, indent=2, ensure_ascii=False, sort_keys=True)
        offered = PAGE_ACTIONS.get(job.status, []) if can_operate_jobs(request.user) else []
        delivery = request_public(job.request)
        return {
            "job": job,
            "delivery": delivery,
            "delivery_shaped": job.request is not None,
            "callback_of": (job.request or {}).get(CALLBACK_OF),
            "timeline": list(reversed(attempts)),
            "older_attempts": older,
            "payload_text": payload[:PAYLOAD_PREVIEW_CHARS],
            "payload_cut": len(payload) > PAYLOAD_PREVIEW_CHARS,
            "metadata_items": sorted(job.metadata.items())
            if isinstance(job.metadata, dict)
            else [],
            "page_actions": offered,
            "may_operate": can_operate_jobs(request.user),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "job_page_action": JOB_PAGE_ACTION,
            "now": db_now(),
            "title": "Job",
            "subtitle": f"{job.id} ({job.team.slug})",
        }
