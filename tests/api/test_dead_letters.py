"""Dead letters over the API: attempts, requeue, and listing dead jobs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduling.models import DeliveryAttempt, Job, JobStatus
from scheduling.sharding.clock import db_now, open_bucket
from tests.support.api import error_of, job_body

pytestmark = pytest.mark.django_db


def make_dead(api) -> Job:
    created = api.post("/api/v1/jobs", job_body(in_seconds=60), format="json").json()
    job = Job.objects.get(id=created["id"])
    now = db_now()
    for n in (1, 2):
        DeliveryAttempt.objects.create(
            job=job,
            attempt=n,
            started_at=now + timedelta(seconds=n),
            duration_ms=12,
            result="retry" if n == 1 else "dead",
            status_code=500 if n == 1 else 410,
            error="HTTP 500: boom" if n == 1 else "HTTP 410: gone",
            poller="p1",
        )
    Job.objects.filter(id=job.id).update(status=JobStatus.DEAD, attempts=2, last_error="HTTP 410")
    return job


def test_attempts_are_listed_oldest_first(api, other_api) -> None:
    job = make_dead(api)
    response = api.get(f"/api/v1/jobs/{job.id}/attempts")
    assert response.status_code == 200
    attempts = response.json()["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[0] == {
        "attempt": 1,
        "started_at": attempts[0]["started_at"],
        "duration_ms": 12,
        "result": "retry",
        "status_code": 500,
        "error": "HTTP 500: boom",
    }
    assert attempts[1]["result"] == "dead" and attempts[1]["status_code"] == 410
    assert other_api.get(f"/api/v1/jobs/{job.id}/attempts").status_code == 404


def test_requeue_a_dead_job(api, other_api) -> None:
    job = make_dead(api)
    dead = api.get("/api/v1/jobs", {"status": "dead"}).json()
    assert [j["id"] for j in dead["results"]] == [str(job.id)]
    assert other_api.post(f"/api/v1/jobs/{job.id}/requeue").status_code == 404
    response = api.post(f"/api/v1/jobs/{job.id}/requeue")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "pending" and body["attempts"] == 0
    row = Job.objects.get(id=job.id)
    assert row.bucket == open_bucket(db_now()) and row.due_at <= db_now()
    # The history stays; only dead or expired jobs can be requeued.
    assert DeliveryAttempt.objects.filter(job=job).count() == 2
    again = api.post(f"/api/v1/jobs/{job.id}/requeue")
    assert again.status_code == 409
    assert error_of(again)["code"] == "not_pending"
