"""Single-job endpoints: create, get, reschedule, cancel; validation and the error shape."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta

import pytest
from django.test import override_settings

from scheduling import keys
from scheduling.models import Bucket, Job, JobStatus
from scheduling.sharding.clock import db_now
from tests.support.api import error_of, iso, job_body
from tests.support.factories import in_flight_mark

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs"


def create(api, **body):
    return api.post(URL, job_body(**body), format="json")


def test_create_webhook_job_returns_201_with_its_place(api) -> None:
    due = db_now() + timedelta(hours=1)
    response = api.post(
        URL,
        {
            "due_at": due.isoformat(),
            "callback_url": "https://example.com/hooks/r",
            "payload": {"booking": 42},
            "metadata": {"booking": "42"},
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    job = response.json()
    row = Job.objects.get(id=job["id"])
    assert row.target_kind == "webhook" and row.target == "https://example.com/hooks/r"
    assert job["callback_url"] == "https://example.com/hooks/r" and job["handler"] is None
    assert job["status"] == "pending" and job["attempts"] == 0
    assert datetime.fromisoformat(job["due_at"]) == due
    assert datetime.fromisoformat(job["bucket"]) == keys.bucket_of(due, 60)
    count = Bucket.objects.get(start=row.bucket).shard_count
    assert job["shard"] == keys.shard_of(uuid.UUID(job["id"]), count)
    assert job["metadata"] == {"booking": "42"} and job["payload"] == {"booking": 42}
    assert response["Location"] == f"/api/v1/jobs/{job['id']}"


def test_offsets_are_converted_to_utc(api) -> None:
    due = (db_now() + timedelta(days=2)).replace(microsecond=0)
    local = due.astimezone(datetime.fromisoformat("2020-01-01T00:00:00+05:30").tzinfo)
    response = api.post(URL, job_body(due_at=local.isoformat()), format="json")
    assert response.status_code == 201
    assert response.json()["due_at"] == due.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_window_and_expiry_are_exposed(api) -> None:
    due = (db_now() + timedelta(hours=3)).replace(microsecond=0)
    response = api.post(
        URL,
        job_body(due_at=iso(due), window_seconds=900, expires_after_seconds=600),
        format="json",
    )
    assert response.status_code == 201
    job = response.json()
    effective = datetime.fromisoformat(job["due_at"])
    assert due <= effective <= due + timedelta(seconds=900)
    assert effective == due + keys.spread_offset(uuid.UUID(job["id"]), 900)
    assert job["window_seconds"] == 900
    assert datetime.fromisoformat(job["expires_at"]) == due + timedelta(seconds=600)


def test_get_and_cross_team_404(api, other_api) -> None:
    job_id = create(api).json()["id"]
    got = api.get(f"{URL}/{job_id}")
    assert got.status_code == 200 and got.json()["id"] == job_id
    for response in (
        other_api.get(f"{URL}/{job_id}"),
        other_api.patch(f"{URL}/{job_id}", {"due_at": iso(db_now())}, format="json"),
        other_api.post(f"{URL}/{job_id}/cancel"),
    ):
        assert response.status_code == 404
        assert error_of(response)["code"] == "not_found"
    assert Job.objects.get(id=job_id).status == JobStatus.PENDING
    assert api.get(f"{URL}/{uuid.uuid4()}").status_code == 404


def test_malformed_id_in_path_is_json_404(api) -> None:
    response = api.get(f"{URL}/not-a-uuid")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"colour": "red"}, "colour"),
        ({"due_at": 1700000000}, "due_at"),
        ({"due_at": "tomorrow"}, "due_at"),
        ({"due_at": "2027-03-01T09:00:00"}, "due_at"),
        ({"due_at": "2027-02-30T09:00:00Z"}, "due_at"),
        ({"due_at": "0001-01-01T00:00:00+01:00"}, "due_at"),
        ({"handler": 5}, "handler"),
        ({"window_seconds": "10"}, "window_seconds"),
        ({"window_seconds": -1}, "window_seconds"),
        ({"window_seconds": 10**30}, "window_seconds"),
        ({"expires_after_seconds": 1.5}, "expires_after_seconds"),
        ({"metadata": {"a": 1}}, "metadata.a"),
        ({"metadata": ["a"]}, "metadata"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"payload": None}, "payload"),
        ({"callback_url": "https://example.com/h"}, "handler"),
    ],
)
def test_bad_input_is_400_naming_the_field(api, changes, field) -> None:
    response = api.post(URL, job_body(**changes), format="json")
    assert response.status_code == 400, response.json()
    error = error_of(response)
    assert field in error["fields"], error
    assert not Job.objects.exists()


def test_no_target_is_400(api) -> None:
    body = job_body()
    del body["handler"]
    response = api.post(URL, body, format="json")
    assert response.status_code == 400
    assert "callback_url, handler or topic" in error_of(response)["message"]


@pytest.mark.parametrize(
    ("changes", "field", "code"),
    [
        (
            {"due_at": iso(datetime.now().astimezone() + timedelta(days=401))},
            "due_at",
            "invalid_due_at",
        ),
        ({"handler": "no.such.handler"}, "handler", "invalid_target"),
        (
            {"handler": None, "callback_url": "ftp://example.com/x"},
            "callback_url",
            "invalid_target",
        ),
        ({"handler": None, "callback_url": "http://127.0.0.1/x"}, "callback_url", "invalid_target"),
        ({"handler": None, "callback_url": "http://10.1.2.3/x"}, "callback_url", "invalid_target"),
        (
            {"handler": None, "callback_url": "http://169.254.169.254/"},
            "callback_url",
            "invalid_target",
        ),
    ],
)
def test_domain_errors_use_the_request_field_names(api, changes, field, code) -> None:
    body = job_body(**changes)
    body = {k: v for k, v in body.items() if v is not None}
    response = api.post(URL, body, format="json")
    assert response.status_code == 400, response.json()
    error = error_of(response)
    assert error["code"] == code
    assert list(error["fields"]) == [field]


@override_settings(SENDLATER_CALLBACK_ALLOWLIST=["127.0.0.1"])
def test_allowlisted_loopback_callback_is_accepted(api) -> None:
    body = job_body(callback_url="http://127.0.0.1:9000/hook")
    del body["handler"]
    assert api.post(URL, body, format="json").status_code == 201


@override_settings(SENDLATER_MAX_PAYLOAD_BYTES=1024)
def test_payload_over_the_limit_is_413(api) -> None:
    response = create(api, payload={"blob": "x" * 1100})
    assert response.status_code == 413
    error = error_of(response)
    assert error["code"] == "payload_too_large" and list(error["fields"]) == ["payload"]
    assert create(api, payload={"blob": "x" * 900}).status_code == 201


@override_settings(SENDLATER_MAX_REQUEST_BYTES=2048)
def test_body_over_the_request_limit_is_413(api) -> None:
    response = create(api, payload={"blob": "x" * 3000})
    assert response.status_code == 413
    assert error_of(response)["code"] == "request_too_large"


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b'{"due_at": "2030-01-01T00:00:00Z", "handler": "noop", "payload": {"a": "\\u0000"}}',
        b'{"due_at": "2030-01-01T00:00:00Z", "handler": "noop", "payload": {"a": "\\ud800"}}',
        b'{"due_at": "2030-01-01T00:00:00Z", "handler": "noop", "payload": 1e400}',
        b'{"due_at": "2030-01-01T00:00:00Z", "handler": "noop", "payload": NaN}',
        b"[" * 100_000,
        b"\xff\xfe",
    ],
)
def test_unparsable_or_unstorable_json_is_400(api, raw: bytes) -> None:
    response = api.post(URL, raw, content_type="application/json")
    assert response.status_code == 400
    assert error_of(response)["code"] == "parse_error"


def test_non_object_body_is_400(api) -> None:
    response = api.post(URL, json.dumps([1, 2]), content_type="application/json")
    assert response.status_code == 400
    error_of(response)


def test_form_body_is_415(api) -> None:
    response = api.post(URL, "due_at=x", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert error_of(response)["code"] == "unsupported_media_type"


def test_idempotent_replay_is_200_with_the_same_job(api) -> None:
    body = job_body(idempotency_key="booking-42")
    first = api.post(URL, body, format="json")
    again = api.post(URL, body, format="json")
    assert first.status_code == 201 and again.status_code == 200
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 1


def test_same_key_different_body_is_409(api, other_api) -> None:
    body = job_body(idempotency_key="booking-42")
    assert api.post(URL, body, format="json").status_code == 201
    response = api.post(URL, {**body, "payload": {"n": 2}}, format="json")
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "idempotency_conflict" and "idempotency_key" in error["fields"]
    # Keys are per team: another team may use the same one.
    assert other_api.post(URL, {**body, "payload": {"n": 2}}, format="json").status_code == 201
    assert Job.objects.count() == 2


def test_reschedule_moves_bucket_and_shard(api) -> None:
    job = create(api, in_seconds=600).json()
    new_due = (db_now() + timedelta(days=30)).replace(microsecond=0)
    response = api.patch(
        f"{URL}/{job['id']}", {"due_at": iso(new_due), "payload": {"v": 2}}, format="json"
    )
    assert response.status_code == 200, response.json()
    moved = response.json()
    assert datetime.fromisoformat(moved["due_at"]) == new_due
    assert datetime.fromisoformat(moved["bucket"]) == keys.bucket_of(new_due, 60)
    count = Bucket.objects.get(start=keys.bucket_of(new_due, 60)).shard_count
    assert moved["shard"] == keys.shard_of(uuid.UUID(job["id"]), count)
    assert moved["payload"] == {"v": 2}
    row = Job.objects.get(id=job["id"])
    assert row.due_at == new_due and row.payload == {"v": 2}


def test_reschedule_rejects_other_fields_and_bad_times(api) -> None:
    job_id = create(api).json()["id"]
    url = f"{URL}/{job_id}"
    response = api.patch(url, {"due_at": iso(db_now()), "handler": "log"}, format="json")
    assert response.status_code == 400 and "handler" in error_of(response)["fields"]
    response = api.patch(url, {"due_at": "2027-01-01T00:00:00"}, format="json")
    assert response.status_code == 400 and "due_at" in error_of(response)["fields"]
    response = api.patch(url, {"due_at": iso(db_now() + timedelta(days=500))}, format="json")
    assert response.status_code == 400 and error_of(response)["code"] == "invalid_due_at"


def test_cancel_keeps_the_job_readable_and_second_cancel_is_409(api) -> None:
    job_id = create(api).json()["id"]
    response = api.post(f"{URL}/{job_id}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "canceled"
    assert api.get(f"{URL}/{job_id}").json()["status"] == "canceled"
    again = api.post(f"{URL}/{job_id}/cancel")
    assert again.status_code == 409 and error_of(again)["code"] == "not_pending"
    patch = api.patch(f"{URL}/{job_id}", {"due_at": iso(db_now())}, format="json")
    assert patch.status_code == 409
    # Cancel is a state change, not a deletion: there is no DELETE on a job.
    delete = api.delete(f"{URL}/{job_id}")
    assert delete.status_code == 405 and error_of(delete)["code"] == "method_not_allowed"


@pytest.mark.parametrize("state", ["in flight", JobStatus.DELIVERED, JobStatus.EXPIRED])
def test_cancel_or_reschedule_of_in_flight_or_finished_job_is_409(api, state) -> None:
    job_id = create(api).json()["id"]
    if state == "in flight":  # read by a poller, not yet written back: still pending
        in_flight_mark(Job.objects.get(id=job_id))
    else:
        Job.objects.filter(id=job_id).update(status=state)
    response = api.post(f"{URL}/{job_id}/cancel")
    assert response.status_code == 409
    assert error_of(response)["code"] == "not_pending"
    assert ("being delivered" if state == "in flight" else state) in error_of(response)["message"]
    response = api.patch(
        f"{URL}/{job_id}", {"due_at": iso(db_now() + timedelta(hours=1))}, format="json"
    )
    assert response.status_code == 409
    assert Job.objects.get(id=job_id).status == (
        JobStatus.PENDING if state == "in flight" else state
    )


def test_reschedule_moves_expiry_with_the_due_time(api) -> None:
    due = (db_now() + timedelta(hours=1)).replace(microsecond=0)
    job = api.post(
        URL,
        job_body(due_at=iso(due), window_seconds=600, expires_after_seconds=900),
        format="json",
    ).json()
    assert datetime.fromisoformat(job["expires_at"]) == due + timedelta(seconds=900)
    new_due = due + timedelta(days=1)
    moved = api.patch(f"{URL}/{job['id']}", {"due_at": iso(new_due)}, format="json").json()
    assert datetime.fromisoformat(moved["expires_at"]) == new_due + timedelta(seconds=900)
    spread = keys.spread_offset(uuid.UUID(job["id"]), 600)
    assert datetime.fromisoformat(moved["due_at"]) == new_due + spread


@override_settings(SENDLATER_MAX_PAYLOAD_BYTES=512)
def test_reschedule_with_a_payload_over_the_limit_is_413(api) -> None:
    job_id = create(api).json()["id"]
    response = api.patch(
        f"{URL}/{job_id}",
        {"due_at": iso(db_now() + timedelta(hours=1)), "payload": "x" * 600},
        format="json",
    )
    assert response.status_code == 413
    assert error_of(response)["fields"] == {"payload": [error_of(response)["message"]]}
    assert Job.objects.get(id=job_id).payload == {"n": 1}


def test_a_crash_still_answers_json(api, monkeypatch) -> None:
    from scheduling.jobs import selectors

    def boom(**_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(selectors, "job_of_team", boom)  # every read path checks the team there
    api.raise_request_exception = False
    response = api.get(f"{URL}/{uuid.uuid4()}")
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "server_error", "message": "Internal server error; it has been logged."}
    }


def test_unknown_api_path_is_json_404(api) -> None:
    response = api.get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_the_horizon_is_a_written_date_the_schema_states(api) -> None:
    from django.utils import timezone

    from scheduling.api.contract import latest_due_date

    last = latest_due_date(timezone.now().date())
    ok = api.post(URL, {"due_at": f"{last}T23:59:59-23:59", "handler": "noop"}, format="json")
    assert ok.status_code == 201, ok.json()
    late = api.post(
        URL, {"due_at": f"{last + timedelta(days=1)}T00:00:00Z", "handler": "noop"}, format="json"
    )
    assert late.status_code == 400 and error_of(late)["code"] == "invalid_due_at"


def test_payload_null_is_refused_and_integral_floats_are_integers(api) -> None:
    due = iso(db_now() + timedelta(hours=1))
    null = api.post(URL, {"due_at": due, "handler": "noop", "payload": None}, format="json")
    assert null.status_code == 400 and "payload" in error_of(null)["fields"]
    spread = create(api, due_at=due, handler="noop", window_seconds=10.0)
    assert spread.status_code == 201 and spread.json()["window_seconds"] == 10
