"""The console's job and schedule pages show the delivery contract with header values
masked, the kept response and the callbacks (issue 31)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduling.jobs.requests import DeliveryRequest, RetryPolicy
from scheduling.jobs.services import job_schedule
from scheduling.models import Job
from scheduling.schedules.services import ScheduleSpec, schedule_create
from scheduling.sharding.clock import db_now

pytestmark = pytest.mark.django_db
SECRET_VALUE = "Bearer console-must-not-show-this"


@pytest.fixture(autouse=True)
def _allow_loopback(settings):
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]


def test_the_job_page_shows_the_request_masked_and_its_callbacks(admin_client, team) -> None:
    job, _ = job_schedule(
        team=team,
        due_at=db_now() + timedelta(hours=1),
        target_kind="webhook",
        target="http://127.0.0.1:9/hook",
        request=DeliveryRequest(
            method="PUT",
            headers={"Authorization": SECRET_VALUE},
            retry=RetryPolicy(max_attempts=2),
            on_failure_url="http://127.0.0.1:9/failed",
            capture_response=True,
        ),
    )
    callback, _ = job_schedule(
        team=team, due_at=db_now(), target_kind="webhook", target="http://127.0.0.1:9/failed"
    )
    request = {**job.request, "callbacks": {"job.dead": str(callback.id)}}
    Job.objects.filter(id=job.id).update(
        request=request,
        response={"status_code": 200, "content_type": "text/plain", "body_excerpt": "fine",
                  "duration_ms": 12},
    )  # fmt: skip
    Job.objects.filter(id=callback.id).update(
        request={"format": "payload", "callback_of": str(job.id)}
    )
    page = admin_client.get(f"/admin/scheduling/job/{job.id}/change/").content.decode()
    assert 'id="job-request"' in page and "PUT" in page
    assert "Authorization: ********" in page
    assert "console-must-not-show-this" not in page
    assert "max_attempts=2" in page and "http://127.0.0.1:9/failed" in page
    assert f"/admin/scheduling/job/{callback.id}/change/" in page
    assert 'id="job-response"' in page and "fine" in page
    child = admin_client.get(f"/admin/scheduling/job/{callback.id}/change/").content.decode()
    assert 'id="job-callback-of"' in child and str(job.id) in child


def test_the_schedule_page_masks_header_values(admin_client, team) -> None:
    spec = ScheduleSpec(
        target_kind="webhook",
        target="http://127.0.0.1:9/hook",
        every_seconds=60,
        request=DeliveryRequest(headers={"Authorization": SECRET_VALUE}),
    )
    schedule = schedule_create(team=team, spec=spec)
    page = admin_client.get(f"/admin/scheduling/schedule/{schedule.id}/change/").content.decode()
    assert "Authorization" in page and "********" in page
    assert "console-must-not-show-this" not in page
    assert schedule.request["headers_sealed"] not in page
