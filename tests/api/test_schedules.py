"""The recurring-schedules API: create, list, get, patch, delete, pause, resume, preview."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from scheduling.models import Job, Schedule
from scheduling.sharding.clock import db_now
from tests.support.api import error_of, iso

pytestmark = pytest.mark.django_db

URL = "/api/v1/schedules"


def create(api, **body):
    payload = {"handler": "noop"} if "cron" in body else {"every_seconds": 60, "handler": "noop"}
    payload.update(body)
    return api.post(URL, payload, format="json")


def test_create_cron_schedule_answers_201_with_the_next_five_instants(api) -> None:
    response = create(
        api,
        cron="0 9 * * MON-FRI",
        timezone="America/New_York",
        payload={"kind": "standup"},
        metadata={"team": "blue"},
    )
    body = response.json()
    assert response.status_code == 201, body
    assert response["Location"] == f"{URL}/{body['id']}"
    assert body["paused"] is False and body["missed"] == "skip" and body["every_seconds"] is None
    instants = [datetime.fromisoformat(t) for t in body["next_occurrences"]]
    assert len(instants) == 5 and instants == sorted(instants)
    for instant in instants:
        local = instant.astimezone(__import__("zoneinfo").ZoneInfo("America/New_York"))
        assert (local.hour, local.minute) == (9, 0) and local.weekday() < 5


def test_create_with_every_seconds_and_the_json_null_fields(api) -> None:
    response = create(api, every_seconds=300, start_at=None, end_at=None, callback_url=None)
    # callback_url null is not a string: refused, naming it.
    assert response.status_code == 400
    assert "callback_url" in error_of(response)["fields"]
    response = create(api, every_seconds=300, start_at=None, end_at=None)
    assert response.status_code == 201, response.json()
    schedule = Schedule.objects.get(id=response.json()["id"])
    assert schedule.every_seconds == 300 and schedule.cron is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * *"}, "cron"),
        ({"cron": "not a cron at all"}, "cron"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"cron": "* * * * *", "every_seconds": 60}, "cron"),  # both
        ({"every_seconds": 4}, "every_seconds"),
        ({"every_seconds": "60"}, "every_seconds"),
        ({"missed": "sometimes"}, "missed"),
        ({"handler": "no-such-handler"}, "handler"),
        ({"payload": None}, "payload"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(api, body, field) -> None:
    response = create(api, **body)
    assert response.status_code == 400, response.json()
    assert field in error_of(response)["fields"], response.json()


def test_neither_cron_nor_every_seconds_names_cron(api) -> None:
    response = api.post(URL, {"handler": "noop"}, format="json")
    assert response.status_code == 400
    assert "cron" in error_of(response)["fields"]


def test_list_pages_get_and_team_isolation(api, other_api) -> None:
    ids = [create(api).json()["id"] for _ in range(3)]
    page = api.get(URL, {"limit": 2}).json()
    assert [s["id"] for s in page["results"]] == ids[:2] and page["next_cursor"]
    rest = api.get(URL, {"limit": 2, "cursor": page["next_cursor"]}).json()
    assert [s["id"] for s in rest["results"]] == ids[2:] and rest["next_cursor"] is None
    assert api.get(f"{URL}/{ids[0]}").json()["id"] == ids[0]
    assert other_api.get(f"{URL}/{ids[0]}").status_code == 404
    assert other_api.get(URL).json()["results"] == []
    assert error_of(api.get(URL, {"cursor": "!!"}))["fields"]["cursor"]


def test_occurrences_preview_count(api) -> None:
    sid = create(api, cron="*/15 * * * *").json()["id"]
    got = api.get(f"{URL}/{sid}/occurrences", {"count": 100}).json()["occurrences"]
    assert len(got) == 100
    assert all(datetime.fromisoformat(t).minute % 15 == 0 for t in got)
    assert len(api.get(f"{URL}/{sid}/occurrences").json()["occurrences"]) == 10
    bad = api.get(f"{URL}/{sid}/occurrences", {"count": 101})
    assert bad.status_code == 400 and "count" in error_of(bad)["fields"]


def test_end_at_bounds_the_instants(api) -> None:
    start = (db_now() + timedelta(hours=1)).replace(microsecond=0)
    body = create(
        api, every_seconds=600, start_at=iso(start), end_at=iso(start + timedelta(minutes=20))
    ).json()
    got = [datetime.fromisoformat(t) for t in body["next_occurrences"]]
    assert got == [start, start + timedelta(minutes=10), start + timedelta(minutes=20)]


def test_patch_pause_resume_delete(api) -> None:
    sid = create(api).json()["id"]
    patched = api.patch(
        f"{URL}/{sid}", {"cron": "0 12 * * *", "timezone": "Europe/London"}, format="json"
    )
    assert patched.status_code == 200, patched.json()
    assert patched.json()["cron"] == "0 12 * * *" and patched.json()["every_seconds"] is None
    both = api.patch(f"{URL}/{sid}", {"cron": "* * * * *", "every_seconds": 60}, format="json")
    assert both.status_code == 400
    bad_end = api.patch(
        f"{URL}/{sid}",
        {"start_at": "2030-01-01T00:00:00Z", "end_at": "2029-01-01T00:00:00Z"},
        format="json",
    )
    # An empty range is refused, naming end_at (issue 30); the schedule is unchanged.
    assert bad_end.status_code == 400 and list(error_of(bad_end)["fields"]) == ["end_at"]
    assert api.get(f"{URL}/{sid}").json()["end_at"] is None
    assert api.post(f"{URL}/{sid}/pause").json()["paused"] is True
    assert api.post(f"{URL}/{sid}/resume").json()["paused"] is False
    assert api.delete(f"{URL}/{sid}").status_code == 204
    assert api.get(f"{URL}/{sid}").status_code == 404
    assert api.post(f"{URL}/{uuid.uuid4()}/pause").status_code == 404


def test_jobs_list_filters_by_schedule_id(api, team) -> None:
    from scheduling.jobs.services import job_schedule

    sid = uuid.uuid4()
    job, _ = job_schedule(
        team=team, due_at=db_now() + timedelta(hours=1), target_kind="handler", target="noop"
    )
    at = datetime(2030, 1, 1, tzinfo=UTC)
    Job.objects.filter(id=job.id).update(schedule_id=sid, scheduled_for=at)
    job_schedule(
        team=team, due_at=db_now() + timedelta(hours=1), target_kind="handler", target="noop"
    )
    got = api.get("/api/v1/jobs", {"schedule_id": str(sid)}).json()["results"]
    assert [j["id"] for j in got] == [str(job.id)]
    assert got[0]["schedule_id"] == str(sid) and got[0]["scheduled_for"] == "2030-01-01T00:00:00Z"
    assert api.get(f"/api/v1/jobs/{job.id}").json()["schedule_id"] == str(sid)


@pytest.mark.parametrize("after_start", [timedelta(0), timedelta(seconds=-1), timedelta(days=-3)])
def test_end_at_not_after_start_at_is_a_400_naming_end_at(api, after_start) -> None:
    start = (db_now() + timedelta(hours=1)).replace(microsecond=0)
    end = start + after_start
    response = create(api, every_seconds=600, start_at=iso(start), end_at=iso(end))
    assert response.status_code == 400, response.json()
    assert list(error_of(response)["fields"]) == ["end_at"], response.json()
    assert not Schedule.objects.exists()


def test_patch_end_at_not_after_the_schedules_start_at_is_a_400(api) -> None:
    start = (db_now() + timedelta(hours=1)).replace(microsecond=0)
    end = start + timedelta(hours=1)
    sid = create(api, every_seconds=600, start_at=iso(start), end_at=iso(end)).json()["id"]
    for change in (
        {"end_at": iso(start)},
        {"end_at": iso(start - timedelta(minutes=1))},
        {"start_at": iso(end + timedelta(seconds=1))},
        {"start_at": iso(end)},
    ):
        response = api.patch(f"{URL}/{sid}", change, format="json")
        assert response.status_code == 400, (change, response.json())
        assert list(error_of(response)["fields"]) == ["end_at"], response.json()
    schedule = Schedule.objects.get(id=sid)
    assert (schedule.start_at, schedule.end_at) == (start, end)
    response = api.patch(f"{URL}/{sid}", {"end_at": None}, format="json")
    assert response.status_code == 200, response.json()
    response = api.patch(f"{URL}/{sid}", {"start_at": iso(end + timedelta(days=1))}, format="json")
    assert response.status_code == 200, response.json()


@pytest.mark.parametrize(
    "cron",
    [
        "0 9 * * mon-fri",
        "0 9 * * Mon-Fri,sun",
        "0 9 31 1,3,5 *",
        "0 9 31 jan,mar *",
        "0 9 30 1-2 *",
        "0 9 30,31 4,5 *",
        "0 9 31 4 mon",  # either day: Mondays of April
        "0 9 31,1 4 *",
        "0 9 * */2 *",
    ],
)
def test_cron_accepts_what_cron_accepts(api, cron) -> None:
    response = create(api, cron=cron)
    assert response.status_code == 201, response.json()
    assert response.json()["next_occurrences"], cron


@pytest.mark.parametrize("cron", ["0 9 31 4 *", "0 9 30 feb *", "0 9 31 2,4,6 *", "0 9 31 4-4 *"])
def test_a_day_no_listed_month_has_is_a_400_naming_cron(api, cron) -> None:
    response = create(api, cron=cron)
    assert response.status_code == 400, response.json()
    assert list(error_of(response)["fields"]) == ["cron"]
