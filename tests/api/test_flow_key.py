"""``flow_control_key`` on every write path of jobs and schedules, in the bodies, as a filter."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduling.api.jobs.bodies import JobSerializer, job_body
from scheduling.api.jobs.bulkplain import bulk_jobs_plain
from scheduling.models import Job, Schedule
from scheduling.sharding.clock import db_now
from tests.support.api import error_of, iso
from tests.support.api import job_body as new_job

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs"
BULK = "/api/v1/jobs/bulk"
SCHEDULES = "/api/v1/schedules"
KEY = "partner-api"


def test_single_create_stores_and_returns_the_key(api) -> None:
    response = api.post(JOBS, new_job(flow_control_key=KEY), format="json")
    body = response.json()
    assert response.status_code == 201, body
    assert body["flow_control_key"] == KEY
    job = Job.objects.get(id=body["id"])
    assert job.flow_control_key == KEY
    assert api.get(f"{JOBS}/{job.id}").json()["flow_control_key"] == KEY
    assert job_body(job) == dict(JobSerializer(job).data)


def test_without_a_key_or_with_null_the_job_has_none(api) -> None:
    for extra in ({}, {"flow_control_key": None}):
        body = api.post(JOBS, new_job(**extra), format="json").json()
        assert body["flow_control_key"] is None
        assert Job.objects.get(id=body["id"]).flow_control_key is None


def test_the_idempotent_path_keeps_the_key_and_tells_keys_apart(api) -> None:
    body = new_job(flow_control_key=KEY, idempotency_key="order-7")
    first = api.post(JOBS, body, format="json")
    assert first.status_code == 201 and first.json()["flow_control_key"] == KEY
    again = api.post(JOBS, body, format="json")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert again.json()["flow_control_key"] == KEY
    other = api.post(JOBS, {**body, "flow_control_key": "other"}, format="json")
    assert other.status_code == 409
    assert error_of(other)["code"] == "idempotency_conflict"


def test_a_request_without_a_key_keeps_its_old_fingerprint(api) -> None:
    # Fingerprints stored before keys existed must still match their replays.
    from scheduling.jobs.specs import JobSpec

    spec = JobSpec(due_at=db_now(), target_kind="handler", target="noop")
    assert spec.fingerprint() == JobSpec(**{**vars(spec), "flow_control_key": None}).fingerprint()
    assert spec.fingerprint() != JobSpec(**{**vars(spec), "flow_control_key": "k"}).fingerprint()


@pytest.mark.parametrize(
    "key",
    ["k" * 101, "", "a/b", 12, ["k"]],
)
def test_a_bad_key_is_400_naming_the_field(api, key) -> None:
    response = api.post(JOBS, new_job(flow_control_key=key), format="json")
    assert response.status_code == 400
    assert "flow_control_key" in error_of(response)["fields"]
    assert not Job.objects.exists()


def test_a_key_of_100_characters_and_any_text_is_accepted(api) -> None:
    for key in ("k" * 100, "tenant:42 é ✓", " spaced "):
        response = api.post(JOBS, new_job(flow_control_key=key), format="json")
        assert response.status_code == 201, response.json()
        assert response.json()["flow_control_key"] == key


def test_the_service_checks_the_key_too(team) -> None:
    from scheduling.errors import SchedulingError
    from scheduling.jobs.services import job_schedule

    with pytest.raises(SchedulingError) as error:
        job_schedule(
            team=team,
            due_at=db_now() + timedelta(hours=1),
            target_kind="handler",
            target="noop",
            flow_control_key="x" * 101,
        )
    assert error.value.field == "flow_control_key"


def test_bulk_items_carry_their_keys_on_the_direct_and_the_serializer_path(api) -> None:
    jobs = [new_job(flow_control_key=KEY), new_job(), new_job(flow_control_key=None)]
    assert bulk_jobs_plain({"jobs": jobs}) is not None  # the direct path (COPY on PostgreSQL)
    response = api.post(BULK, {"jobs": jobs}, format="json")
    assert response.status_code == 201, response.json()
    ids = [item["id"] for item in response.json()["jobs"]]
    keys = {str(j.id): j.flow_control_key for j in Job.objects.all()}
    assert [keys[i] for i in ids] == [KEY, None, None]
    # A body the direct path leaves to the serializer (a float integer) keeps them too.
    jobs = [new_job(flow_control_key="k2", window_seconds=0.0)]
    assert bulk_jobs_plain({"jobs": jobs}) is None
    response = api.post(BULK, {"jobs": jobs}, format="json")
    assert response.status_code == 201, response.json()
    assert Job.objects.get(id=response.json()["jobs"][0]["id"]).flow_control_key == "k2"


def test_a_bad_bulk_key_names_the_item(api) -> None:
    jobs = [new_job(), new_job(flow_control_key="k" * 101)]
    response = api.post(BULK, {"jobs": jobs}, format="json")
    assert response.status_code == 400
    assert "jobs[1].flow_control_key" in error_of(response)["fields"]
    assert not Job.objects.exists()


def test_the_direct_bulk_path_refuses_what_the_serializer_refuses() -> None:
    for key in ("k" * 101, "", "a/b", "a\x00b", 7, "\ud800"):
        assert bulk_jobs_plain({"jobs": [new_job(flow_control_key=key)]}) is None, key


def test_reschedule_keeps_the_key(api) -> None:
    job = api.post(JOBS, new_job(flow_control_key=KEY), format="json").json()
    later = iso(db_now() + timedelta(hours=2))
    moved = api.patch(f"{JOBS}/{job['id']}", {"due_at": later}, format="json")
    assert moved.status_code == 200 and moved.json()["flow_control_key"] == KEY
    assert Job.objects.get(id=job["id"]).flow_control_key == KEY


def test_the_list_filters_by_key(api, other_api) -> None:
    mine = api.post(JOBS, new_job(flow_control_key=KEY), format="json").json()["id"]
    api.post(JOBS, new_job(flow_control_key="other"), format="json")
    api.post(JOBS, new_job(), format="json")
    other_api.post(JOBS, new_job(flow_control_key=KEY), format="json")  # another team's
    found = api.get(JOBS, {"flow_control_key": KEY}).json()["results"]
    assert [job["id"] for job in found] == [mine]
    assert len(api.get(JOBS).json()["results"]) == 3
    response = api.get(JOBS, {"flow_control_key": "k" * 101})
    assert response.status_code == 400
    assert "flow_control_key" in error_of(response)["fields"]


def test_schedules_take_return_and_change_the_key(api) -> None:
    response = api.post(
        SCHEDULES,
        {"every_seconds": 60, "handler": "noop", "flow_control_key": KEY},
        format="json",
    )
    body = response.json()
    assert response.status_code == 201, body
    assert body["flow_control_key"] == KEY
    assert Schedule.objects.get(id=body["id"]).flow_control_key == KEY
    url = f"{SCHEDULES}/{body['id']}"
    changed = api.patch(url, {"flow_control_key": "other"}, format="json")
    assert changed.status_code == 200 and changed.json()["flow_control_key"] == "other"
    kept = api.patch(url, {"every_seconds": 120}, format="json").json()
    assert kept["flow_control_key"] == "other"  # a PATCH without it keeps it
    cleared = api.patch(url, {"flow_control_key": None}, format="json")
    assert cleared.status_code == 200 and cleared.json()["flow_control_key"] is None
    bad = api.patch(url, {"flow_control_key": "k" * 101}, format="json")
    assert bad.status_code == 400 and "flow_control_key" in error_of(bad)["fields"]
    no_key = api.post(SCHEDULES, {"every_seconds": 60, "handler": "noop"}, format="json")
    assert no_key.json()["flow_control_key"] is None


def test_a_bad_schedule_key_is_400_naming_the_field(api) -> None:
    response = api.post(
        SCHEDULES,
        {"every_seconds": 60, "handler": "noop", "flow_control_key": "a/b"},
        format="json",
    )
    assert response.status_code == 400
    assert "flow_control_key" in error_of(response)["fields"]
