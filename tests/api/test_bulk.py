"""Bulk create (all or nothing, per-item errors, few statements) and bulk cancel."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling import keys
from scheduling.models import Bucket, Job, JobStatus
from scheduling.sharding.clock import db_now
from tests.support.api import error_of, iso, job_body
from tests.support.factories import in_flight_mark

pytestmark = pytest.mark.django_db

BULK = "/api/v1/jobs/bulk"
CANCEL = "/api/v1/jobs/cancel"


def test_bulk_creates_jobs_in_input_order(api) -> None:
    jobs = [job_body(in_seconds=60 * (i + 1), payload={"i": i}) for i in range(5)]
    response = api.post(BULK, {"jobs": jobs}, format="json")
    assert response.status_code == 201, response.json()
    out = response.json()["jobs"]
    assert len(out) == 5 and all(item["created"] for item in out)
    for body, item in zip(jobs, out, strict=True):
        row = Job.objects.get(id=item["id"])
        assert iso(row.due_at) == body["due_at"]
        assert row.payload == body["payload"]
        count = Bucket.objects.get(start=row.bucket).shard_count
        assert item["shard"] == keys.shard_of(uuid.UUID(item["id"]), count)


def test_one_thousand_jobs_in_a_handful_of_statements(api) -> None:
    now = db_now()
    jobs = [
        {"due_at": iso(now + timedelta(seconds=60 + i)), "handler": "noop", "payload": {"i": i}}
        for i in range(1000)
    ]
    with CaptureQueriesContext(connection) as queries:
        response = api.post(BULK, {"jobs": jobs}, format="json")
    assert response.status_code == 201
    assert Job.objects.count() == 1000
    # The throttle's cache and savepoints aside: the key, the clock (PostgreSQL),
    # at most three for bucket counts and one INSERT (COPY on PostgreSQL) for the
    # thousand rows.
    work = [
        q["sql"]
        for q in queries
        if "sendlater_cache" not in q["sql"] and "SAVEPOINT" not in q["sql"]
    ]
    assert len(work) <= 7, work
    inserts = ('INSERT INTO "scheduling_job"', "COPY scheduling_job")
    assert sum(sql.startswith(inserts) for sql in work) == 1


def test_invalid_item_writes_nothing_and_names_the_item(api) -> None:
    jobs = [job_body(in_seconds=60 + i) for i in range(20)]
    jobs[17]["due_at"] = "2027-03-01T09:00:00"  # naive
    jobs[3]["colour"] = "red"
    response = api.post(BULK, {"jobs": jobs}, format="json")
    assert response.status_code == 400
    fields = error_of(response)["fields"]
    assert set(fields) == {"jobs[17].due_at", "jobs[3].colour"}
    assert not Job.objects.exists() and not Bucket.objects.exists()


def test_service_error_in_bulk_names_the_item_and_request_field(api) -> None:
    jobs = [job_body(in_seconds=60 + i) for i in range(8)]
    jobs[5]["handler"] = "no.such.handler"
    jobs[6] = {k: v for k, v in jobs[6].items() if k != "handler"}
    jobs[6]["callback_url"] = "http://192.168.1.1/hook"
    response = api.post(BULK, {"jobs": jobs}, format="json")
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_target"
    # The callback URL is refused by its field, before the service sees any job.
    assert list(error["fields"]) == ["jobs[6].callback_url"]
    callback = jobs.pop(6)
    response = api.post(BULK, {"jobs": jobs}, format="json")
    assert list(error_of(response)["fields"]) == ["jobs[5].handler"]
    jobs[5] = callback
    response = api.post(BULK, {"jobs": jobs}, format="json")
    assert list(error_of(response)["fields"]) == ["jobs[5].callback_url"]
    jobs[1]["due_at"] = iso(db_now() + timedelta(days=1000))
    response = api.post(BULK, {"jobs": jobs}, format="json")
    assert list(error_of(response)["fields"]) == ["jobs[1].due_at", "jobs[5].callback_url"]
    assert error_of(response)["code"] == "invalid"  # two kinds of error at once
    assert not Job.objects.exists()


@pytest.mark.parametrize("jobs", [[], "x", [1], None])
def test_bulk_shape_errors(api, jobs) -> None:
    response = api.post(BULK, {"jobs": jobs}, format="json")
    assert response.status_code == 400
    assert error_of(response)["fields"]


def test_more_than_1000_jobs_is_400(api) -> None:
    response = api.post(BULK, {"jobs": [job_body()] * 1001}, format="json")
    assert response.status_code == 400
    assert "jobs" in error_of(response)["fields"]


def test_bulk_idempotent_replay_and_conflict(api) -> None:
    jobs = [job_body(idempotency_key=f"k{i}") for i in range(3)]
    first = api.post(BULK, {"jobs": jobs}, format="json")
    again = api.post(BULK, {"jobs": jobs}, format="json")
    assert first.status_code == 201 and again.status_code == 200
    assert [j["id"] for j in again.json()["jobs"]] == [j["id"] for j in first.json()["jobs"]]
    assert not any(j["created"] for j in again.json()["jobs"])
    jobs[2]["payload"] = {"changed": True}
    conflict = api.post(BULK, {"jobs": [job_body(), *jobs]}, format="json")
    assert conflict.status_code == 409
    assert error_of(conflict)["code"] == "idempotency_conflict"
    assert Job.objects.count() == 3


def _scheduled(api, n, **extra):
    response = api.post(BULK, {"jobs": [job_body(**extra) for _ in range(n)]}, format="json")
    assert response.status_code == 201
    return [item["id"] for item in response.json()["jobs"]]


def test_cancel_by_metadata_cancels_only_matching_pending_jobs(api, other_api) -> None:
    booking = _scheduled(api, 3, metadata={"booking": "42", "kind": "reminder"})
    other_booking = _scheduled(api, 2, metadata={"booking": "43"})
    foreign = _scheduled(other_api, 2, metadata={"booking": "42"})
    in_flight_mark(Job.objects.get(id=booking[0]))
    with CaptureQueriesContext(connection) as queries:
        response = api.post(CANCEL, {"metadata": {"booking": "42"}}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json() == {"canceled": 2}
    assert sum("UPDATE" in q["sql"] and "scheduling_job" in q["sql"] for q in queries) == 1
    status = dict(Job.objects.values_list("id", "status"))
    assert status[uuid.UUID(booking[0])] == JobStatus.PENDING  # in flight: left alone
    assert {status[uuid.UUID(i)] for i in booking[1:]} == {JobStatus.CANCELED}
    assert {status[uuid.UUID(i)] for i in other_booking + foreign} == {JobStatus.PENDING}
    # Every pair must match.
    response = api.post(CANCEL, {"metadata": {"booking": "43", "kind": "x"}}, format="json")
    assert response.json() == {"canceled": 0}


def test_cancel_by_ids_ignores_other_teams_and_unknown_ids(api, other_api) -> None:
    mine = _scheduled(api, 4)
    foreign = _scheduled(other_api, 1)
    response = api.post(CANCEL, {"ids": [*mine[:3], *foreign, str(uuid.uuid4())]}, format="json")
    assert response.json() == {"canceled": 3}
    assert Job.objects.filter(status=JobStatus.CANCELED).count() == 3
    assert Job.objects.get(id=foreign[0]).status == JobStatus.PENDING
    both = api.post(CANCEL, {"ids": mine, "metadata": {"x": "y"}}, format="json")
    assert both.json() == {"canceled": 0}


@pytest.mark.parametrize(
    "body",
    [{}, {"ids": []}, {"ids": ["nope"]}, {"ids": [5]}, {"metadata": {}}, {"team": "x"}],
)
def test_cancel_many_needs_a_selection(api, body) -> None:
    _scheduled(api, 1)
    response = api.post(CANCEL, body, format="json")
    assert response.status_code == 400
    error_of(response)
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 1
