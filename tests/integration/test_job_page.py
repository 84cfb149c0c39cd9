"""The job in the admin: never deleted by hand, changed only by the console's actions
(through the confirmation page, with a reason and an audit entry), shown compactly."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.test import RequestFactory

from scheduling.jobs.services import job_schedule_many
from scheduling.models import DeliveryAttempt, Job, JobStatus
from scheduling.sharding.clock import db_now
from tests.support.console import operator_make
from tests.support.factories import job_spec

pytestmark = pytest.mark.django_db
# admin_client and admin_user: pytest-django's (a superuser, logged in).

LIST = "/admin/scheduling/job/"
PAGE_ACTION = "CHANGE_FORM-action"
HOOK = "https://example.com/hook"


def _schedule(team, *, minutes: float = 30, **extra) -> Job:
    spec = replace(job_spec(in_seconds=minutes * 60, **extra), target_kind="webhook", target=HOOK)
    ((job, _created),) = job_schedule_many(team=team, specs=[spec])
    return job


def _page(job: Job) -> str:
    return f"{LIST}{job.id}/change/"


def _from_page(client, job: Job, action: str, reason: str = "test", **fields):
    """Press the job page's button, then confirm with ``reason`` (and ``fields``)."""
    selected = {"_selected_action": str(job.id)}
    confirm = client.post(_page(job), {PAGE_ACTION: action, **selected})
    assert confirm.status_code == 200, confirm.content[:300]
    assert b"are you sure?" in confirm.content
    (obj, _line, seen), *_ = confirm.context["objects"]
    assert obj.pk == job.pk
    keep = dict(confirm.context["keep"])
    assert keep == {PAGE_ACTION: action}  # the confirmation returns to the job page
    body = {**selected, **keep, "action": action, "post": "yes", "reason": reason}
    return client.post(_page(job), {**body, f"seen_{job.id}": seen, **fields})


def test_no_delete_anywhere(admin_client, admin_user, team) -> None:
    job = _schedule(team)
    model_admin = admin.site._registry[Job]
    request = RequestFactory().get("/")
    request.user = admin_user
    assert model_admin.has_delete_permission(request) is False
    assert model_admin.has_delete_permission(request, job) is False
    assert "delete_selected" not in model_admin.get_actions(request)
    listing = admin_client.get(LIST).content.decode()
    assert "delete_selected" not in listing and "Delete selected" not in listing
    assert admin_client.get(f"{LIST}{job.id}/delete/").status_code == 403
    assert admin_client.post(f"{LIST}{job.id}/delete/", {"post": "yes"}).status_code == 403
    page = admin_client.get(_page(job)).content.decode()
    assert "deletelink" not in page and "/delete/" not in page
    assert 'name="_save"' not in page and 'name="_continue"' not in page
    # The action is not offered, so a forged one selects nothing.
    forged = admin_client.post(
        LIST, {"action": "delete_selected", "_selected_action": [str(job.id)], "post": "yes"}
    )
    assert forged.status_code in (200, 302)
    # A form save would write every column over a poller's write-back: refused too.
    assert admin_client.post(_page(job), {"status": "canceled"}).status_code == 403
    assert Job.objects.get(id=job.id).status == JobStatus.PENDING


def test_cancel_from_the_job_page_with_a_reason_and_an_audit_entry(admin_client, team) -> None:
    job = _schedule(team)
    page = admin_client.get(_page(job)).content.decode()
    for action in ("fire_now", "reschedule_jobs", "cancel_jobs"):
        assert f'value="{action}"' in page
    assert 'value="requeue_jobs"' not in page  # a pending job is not requeued
    # No reason: the confirmation page again, nothing changed.
    again = _from_page(admin_client, job, "cancel_jobs", reason="")
    assert again.status_code == 200 and again.context["form"].errors["reason"]
    assert Job.objects.get(id=job.id).status == JobStatus.PENDING
    done = _from_page(admin_client, job, "cancel_jobs", reason="customer asked")
    assert done.status_code == 302 and done["Location"] == _page(job)
    assert Job.objects.get(id=job.id).status == JobStatus.CANCELED
    entry = LogEntry.objects.get(object_id=str(job.id))
    assert entry.change_message.startswith(f"Canceled job {job.id}")
    assert entry.change_message.endswith("Reason: customer asked")
    page = admin_client.get(_page(job)).content.decode()
    assert 'id="job-actions"' not in page and 'id="job-no-actions"' in page


def test_fire_now_and_reschedule_from_the_job_page(admin_client, team) -> None:
    job = _schedule(team, minutes=120)
    before = db_now()
    assert _from_page(admin_client, job, "fire_now").status_code == 302
    fired = Job.objects.get(id=job.id)
    assert fired.status == JobStatus.PENDING
    assert before - timedelta(seconds=1) <= fired.due_at <= db_now()
    new_due = (db_now() + timedelta(days=2)).replace(microsecond=0)
    bad = _from_page(admin_client, fired, "reschedule_jobs", due_at="not a time")
    assert bad.status_code == 200 and bad.context["form"].errors["due_at"]
    done = _from_page(
        admin_client, fired, "reschedule_jobs", due_at=new_due.strftime("%Y-%m-%d %H:%M:%S")
    )
    assert done.status_code == 302 and done["Location"] == _page(job)
    moved = Job.objects.get(id=job.id)
    assert moved.due_at == new_due and moved.bucket > fired.bucket
    messages = [m.message for m in done.wsgi_request._messages]
    assert "Reschedule jobs: 1 done." in messages
    # Beyond the horizon: the service refuses, and the operator reads why.
    far = (db_now() + timedelta(days=4000)).strftime("%Y-%m-%d %H:%M:%S")
    refused = _from_page(admin_client, moved, "reschedule_jobs", due_at=far)
    assert refused.status_code == 302
    warnings = [m.message for m in refused.wsgi_request._messages]
    assert any("days ahead" in m for m in warnings), warnings
    assert Job.objects.get(id=job.id).due_at == new_due


def test_requeue_a_dead_job_from_its_page(admin_client, team) -> None:
    job = _schedule(team, minutes=5)
    Job.objects.filter(id=job.id).update(status=JobStatus.DEAD, attempts=3)
    job.refresh_from_db()
    page = admin_client.get(_page(job)).content.decode()
    assert 'value="requeue_jobs"' in page and 'value="cancel_jobs"' not in page
    assert _from_page(admin_client, job, "requeue_jobs").status_code == 302
    requeued = Job.objects.get(id=job.id)
    assert requeued.status == JobStatus.PENDING and requeued.attempts == 0


def test_a_job_changed_since_the_confirmation_page_is_skipped(admin_client, team) -> None:
    job = _schedule(team, minutes=60)
    selected = {"_selected_action": str(job.id)}
    confirm = admin_client.post(_page(job), {PAGE_ACTION: "fire_now", **selected})
    (_obj, _line, seen), *_ = confirm.context["objects"]
    later = db_now() + timedelta(hours=5)
    Job.objects.filter(id=job.id).update(due_at=later)  # the team moved it meanwhile
    body = {**selected, PAGE_ACTION: "fire_now", "action": "fire_now", "post": "yes"}
    done = admin_client.post(_page(job), {**body, "reason": "r", f"seen_{job.id}": seen})
    assert done.status_code == 302
    assert Job.objects.get(id=job.id).due_at == later
    assert not LogEntry.objects.exists()


def test_without_the_change_permission_the_page_is_read_only(client, team) -> None:
    job = _schedule(team)
    client.force_login(operator_make("viewer"))  # view_job, not change_job
    page = client.get(_page(job))
    assert page.status_code == 200
    assert 'id="job-actions"' not in page.content.decode()
    forced = client.post(_page(job), {PAGE_ACTION: "cancel_jobs", "_selected_action": str(job.id)})
    assert forced.status_code in (302, 400, 403)
    assert Job.objects.get(id=job.id).status == JobStatus.PENDING
    listing = client.get(LIST).content.decode()
    assert "cancel_jobs" not in listing


def test_the_page_is_compact(admin_client, team) -> None:
    job = _schedule(team, metadata={"customer": "42"}, idempotency_key="order-7")
    started = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    for attempt, result, code, error in ((1, "retry", 503, "upstream down"), (2, "retry", 500, "")):
        DeliveryAttempt.objects.create(
            job=job,
            attempt=attempt,
            started_at=started + timedelta(minutes=attempt),
            duration_ms=120,
            result=result,
            status_code=code,
            error=error,
            poller="p1",
        )
    Job.objects.filter(id=job.id).update(attempts=2)
    response = admin_client.get(_page(job))
    html = response.content.decode()
    assert response.status_code == 200
    assert 'id="job-status" class="job-status pending"' in html
    assert HOOK in html and "customer=42" in html and "order-7" in html
    timeline = html[html.index('id="job-timeline"') :]
    assert timeline.index("#1 retry") < timeline.index("#2 retry") < timeline.index("#3 next")
    assert "upstream down" in timeline and "HTTP 503" in timeline
    # No stacked form: no field rows, no inputs but the action buttons' form.
    assert "form-row" not in html and 'class="readonly"' not in html
    main = html[html.index('id="content-main"') : html.index('id="job-payload"')]
    assert main.count("<input") == 2  # the buttons' form: its CSRF token and the job's id


def test_the_timeline_follows_time_across_a_requeue(admin_client, team, monkeypatch) -> None:
    from polling.console import jobs

    monkeypatch.setattr(jobs, "TIMELINE_ATTEMPTS", 2)
    job = _schedule(team)
    started = datetime(2026, 1, 2, 3, 0, tzinfo=UTC)
    # The first series died after two attempts; requeued, the new one starts at #1.
    for minute, (attempt, result) in enumerate([(1, "retry"), (2, "dead"), (1, "retry")]):
        DeliveryAttempt.objects.create(
            job=job, attempt=attempt, started_at=started + timedelta(minutes=minute), result=result
        )
    Job.objects.filter(id=job.id).update(attempts=1)
    html = admin_client.get(_page(job)).content.decode()
    timeline = html[html.index('id="job-timeline"') : html.index('id="job-payload"')]
    assert "1 earlier attempt(s) not shown" in timeline
    assert timeline.index("#2 dead") < timeline.index("#1 retry") < timeline.index("#2 next")
