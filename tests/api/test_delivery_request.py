"""The delivery contract through the API (issue 31): method, headers, body format and
timeout on jobs, bulk items and schedules; header values masked on the way out and
sealed at rest."""

from __future__ import annotations

import pytest
from django.db import connection

from scheduling.jobs.requests import MASK, headers_unsealed
from scheduling.models import Job, Schedule
from tests.support.api import error_of, job_body

pytestmark = pytest.mark.django_db

HOOK = "http://127.0.0.1:9/hook"
SECRET_VALUE = "Bearer s3cr3t-t0ken-value-for-the-test"


@pytest.fixture(autouse=True)
def _allow_loopback(settings):
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]


def webhook_body(**extra):
    body = job_body(callback_url=HOOK)
    del body["handler"]
    body.update(extra)
    return body


def test_a_job_keeps_its_request_and_shows_header_values_masked(api) -> None:
    response = api.post(
        "/api/v1/jobs",
        webhook_body(
            method="PUT",
            headers={"Authorization": SECRET_VALUE, "X-Tenant": "t-1"},
            format="payload",
            content_type="text/csv",
            payload="a,b\n1,2\n",
            timeout_seconds=7,
        ),
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["method"] == "PUT"
    assert body["headers"] == {"Authorization": MASK, "X-Tenant": MASK}
    assert body["format"] == "payload"
    assert body["content_type"] == "text/csv"
    assert body["timeout_seconds"] == 7
    assert SECRET_VALUE not in response.content.decode()
    read = api.get(f"/api/v1/jobs/{body['id']}").json()
    assert read["headers"] == {"Authorization": MASK, "X-Tenant": MASK}
    listed = api.get("/api/v1/jobs").json()["results"]
    assert SECRET_VALUE not in str(listed)
    job = Job.objects.get(id=body["id"])
    assert headers_unsealed(job.request) == {"Authorization": SECRET_VALUE, "X-Tenant": "t-1"}


def test_a_default_job_stores_no_request(api) -> None:
    response = api.post("/api/v1/jobs", webhook_body(), format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["method"] == "POST" and body["headers"] == {} and body["format"] == "envelope"
    assert body["retry"] is None and body["capture_response"] is False
    assert Job.objects.get(id=body["id"]).request is None


def test_header_values_are_not_in_the_database_in_plain_text(api) -> None:
    api.post(
        "/api/v1/jobs",
        webhook_body(headers={"Authorization": SECRET_VALUE}, idempotency_key="k-1"),
        format="json",
    )
    with connection.cursor() as cursor:
        for table in ("scheduling_job", "scheduling_idempotencykey"):
            cursor.execute(f"SELECT * FROM {table}")
            for row in cursor.fetchall():
                assert "s3cr3t" not in repr(row), table


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("Host", "headers.Host"),
        ("content-length", "headers.content-length"),
        ("Connection", "headers.Connection"),
        ("Transfer-Encoding", "headers.Transfer-Encoding"),
        ("webhook-signature", "headers.webhook-signature"),
        ("Webhook-Id", "headers.Webhook-Id"),
        ("Content-Type", "headers.Content-Type"),
        ("bad name", "headers.bad name"),
    ],
)
def test_refused_headers_are_400s_naming_the_header(api, name, field) -> None:
    response = api.post("/api/v1/jobs", webhook_body(headers={name: "x"}), format="json")
    assert response.status_code == 400
    assert field in error_of(response)["fields"], error_of(response)


def test_header_limits(api) -> None:
    many = {f"X-H{i}": "v" for i in range(21)}
    response = api.post("/api/v1/jobs", webhook_body(headers=many), format="json")
    assert response.status_code == 400 and "headers" in error_of(response)["fields"]
    big = {f"X-H{i}": "v" * 4000 for i in range(3)}  # 12 KB in all
    response = api.post("/api/v1/jobs", webhook_body(headers=big), format="json")
    assert response.status_code == 400 and "headers" in error_of(response)["fields"]
    crlf = {"X-A": "one\r\nX-Injected: two"}
    response = api.post("/api/v1/jobs", webhook_body(headers=crlf), format="json")
    assert response.status_code == 400 and "headers.X-A" in error_of(response)["fields"]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"method": "TRACE"}, "method"),
        ({"format": "raw"}, "format"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"timeout_seconds": 121}, "timeout_seconds"),
        ({"content_type": "text/csv"}, "content_type"),  # without format payload
        ({"format": "payload", "content_type": "no slash"}, "content_type"),
        ({"retry": {"max_attempts": 0}}, "retry.max_attempts"),
        ({"retry": {"max_attempts": 51}}, "retry.max_attempts"),
        (
            {"retry": {"min_backoff_seconds": 60, "max_backoff_seconds": 5}},
            "retry.max_backoff_seconds",
        ),
        ({"retry": {"tries": 3}}, "retry.tries"),
        ({"on_failure_url": "ftp://example.com/x"}, "on_failure_url"),
        ({"capture_response": "yes"}, "capture_response"),
    ],
)
def test_bad_contract_fields_are_400s_naming_the_field(api, extra, field) -> None:
    response = api.post("/api/v1/jobs", webhook_body(**extra), format="json")
    assert response.status_code == 400, response.content
    assert field in error_of(response)["fields"], error_of(response)


def test_bulk_items_carry_their_requests_and_name_the_item_at_fault(api) -> None:
    items = [
        webhook_body(method="DELETE", headers={"X-Key": SECRET_VALUE}),
        webhook_body(),
    ]
    response = api.post("/api/v1/jobs/bulk", {"jobs": items}, format="json")
    assert response.status_code == 201, response.content
    first, second = (Job.objects.get(id=j["id"]) for j in response.json()["jobs"])
    assert first.request["method"] == "DELETE" and first.request["header_names"] == ["X-Key"]
    assert second.request is None
    items[1] = webhook_body(headers={"Host": "evil"})
    response = api.post("/api/v1/jobs/bulk", {"jobs": items}, format="json")
    assert response.status_code == 400
    assert "jobs[1].headers.Host" in error_of(response)["fields"]


def test_an_idempotent_replay_matches_on_header_values(api) -> None:
    body = webhook_body(headers={"Authorization": SECRET_VALUE}, idempotency_key="same")
    assert api.post("/api/v1/jobs", body, format="json").status_code == 201
    assert api.post("/api/v1/jobs", body, format="json").status_code == 200
    other = {**body, "headers": {"Authorization": "Bearer another"}}
    assert api.post("/api/v1/jobs", other, format="json").status_code == 409


def test_a_schedule_keeps_its_request_and_a_patch_merges_into_it(api) -> None:
    response = api.post(
        "/api/v1/schedules",
        {
            "every_seconds": 60,
            "callback_url": HOOK,
            "method": "PATCH",
            "headers": {"Authorization": SECRET_VALUE},
            "retry": {"max_attempts": 2},
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["headers"] == {"Authorization": MASK} and body["method"] == "PATCH"
    assert body["retry"] == {"max_attempts": 2}
    changed = api.patch(
        f"/api/v1/schedules/{body['id']}", {"timeout_seconds": 9}, format="json"
    ).json()
    assert changed["method"] == "PATCH" and changed["timeout_seconds"] == 9
    assert changed["headers"] == {"Authorization": MASK}
    schedule = Schedule.objects.get(id=body["id"])
    assert headers_unsealed(schedule.request) == {"Authorization": SECRET_VALUE}
    response = api.patch(
        f"/api/v1/schedules/{body['id']}", {"headers": {"Upgrade": "h2c"}}, format="json"
    )
    assert response.status_code == 400 and "headers.Upgrade" in error_of(response)["fields"]
