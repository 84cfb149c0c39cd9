"""``job_body`` (the single-job responses, built directly) against ``JobSerializer``."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from scheduling.api.jobs.bodies import JobSerializer, job_body
from scheduling.models import Job, JobStatus, TargetKind


def _job(**fields: object) -> Job:
    at = datetime(2027, 3, 1, 9, 0, 0, 123456, tzinfo=UTC)
    values: dict[str, object] = {
        "id": uuid.uuid4(),
        "team_id": 1,
        "due_at": at,
        "bucket": at.replace(second=0, microsecond=0),
        "shard": 7,
        "status": JobStatus.PENDING,
        "target_kind": TargetKind.HANDLER,
        "target": "noop",
        "payload": {"n": 1, "nested": [1, 2.5, None, "x"]},
        "metadata": {},
        "idempotency_key": None,
        "window_seconds": 0,
        "attempts": 0,
        "last_error": "",
        "created_at": at - timedelta(hours=1),
        "updated_at": at - timedelta(minutes=1),
    }
    values.update(fields)
    return Job(**values)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"target_kind": TargetKind.WEBHOOK, "target": "https://example.com/hook"},
        {"metadata": {"booking": "42", "é": "ü"}, "idempotency_key": "k-1"},
        {
            "status": JobStatus.DELIVERED,
            "attempts": 3,
            "last_error": "HTTP 500",
            "window_seconds": 300,
            "expires_at": datetime(2027, 3, 2, tzinfo=UTC),
            "delivered_at": datetime(2027, 3, 1, 9, 0, 1, tzinfo=UTC),
            "schedule_id": uuid.uuid4(),
            "scheduled_for": datetime(2027, 3, 1, 9, tzinfo=UTC),
            "payload": None,
        },
        {"due_at": datetime(2027, 3, 1, 10, 0, tzinfo=UTC).astimezone()},  # a local offset
    ],
)
def test_job_body_is_what_the_serializer_gives(fields: dict[str, object]) -> None:
    job = _job(**fields)
    assert job_body(job) == dict(JobSerializer(job).data)
    assert list(job_body(job)) == list(JobSerializer(job).data)
