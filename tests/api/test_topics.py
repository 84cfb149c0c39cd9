"""The topics API: put, read, list and delete a team's topics; add, replace, remove,
disable and enable one endpoint; jobs and bulk items naming a topic."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduling.flow.models import FlowControl
from scheduling.models import Job, Topic
from scheduling.sharding.clock import db_now, iso_utc
from tests.support.api import client_for, error_of

pytestmark = pytest.mark.django_db

URL = "/api/v1/topics"
ENDPOINT_FIELDS = [
    "id",
    "url",
    "method",
    "headers",
    "format",
    "content_type",
    "timeout_seconds",
    "retry",
    "flow_control_key",
    "delivery_key",
    "state",
    "disabled_at",
    "disabled_reason",
    "failing_since",
    "created_at",
    "updated_at",
]


def put(api, name="orders", **endpoints):
    return api.put(f"{URL}/{name}", {"endpoints": endpoints}, format="json")


def test_put_creates_then_replaces_and_masks_headers(api, team) -> None:
    response = put(
        api,
        billing={"url": "https://billing.example.com/h", "headers": {"Authorization": "Bearer x"}},
        crm={"url": "https://crm.example.com/h", "format": "payload", "timeout_seconds": 5},
    )
    body = response.json()
    assert response.status_code == 201, body
    assert response["Location"] == f"{URL}/orders"
    assert list(body) == ["name", "endpoints", "created_at", "updated_at"]
    billing, crm = body["endpoints"]
    assert list(billing) == ENDPOINT_FIELDS
    assert billing["id"] == "billing" and billing["headers"] == {"Authorization": "********"}
    assert billing["delivery_key"] == "topic:orders:billing" and billing["state"] == "enabled"
    assert crm["format"] == "payload" and crm["timeout_seconds"] == 5
    assert "Bearer x" not in str(Topic.objects.get().endpoints.get(name="billing").request)
    # A second PUT replaces: crm is gone, warehouse new.
    response = put(
        api,
        billing={"url": "https://billing.example.com/h2"},
        warehouse={"url": "https://wh.example.com/h", "flow_control_key": "wh"},
    )
    assert response.status_code == 200
    ids = [(e["id"], e["url"], e["delivery_key"]) for e in response.json()["endpoints"]]
    assert ids == [
        ("billing", "https://billing.example.com/h2", "topic:orders:billing"),
        ("warehouse", "https://wh.example.com/h", "wh"),
    ]
    assert api.get(f"{URL}/orders").json() == response.json()


def test_endpoints_are_checked_like_callback_urls(api, team) -> None:
    response = put(api, a={"url": "http://10.0.0.5/hook"})
    assert response.status_code == 400
    assert list(error_of(response)["fields"]) == ["endpoints.a.url"]
    response = put(api, **{"bad/id": {"url": "https://example.com/h"}})
    assert response.status_code == 400
    response = put(api, a={"url": "https://example.com/h", "headers": {"Host": "x"}})
    assert response.status_code == 400
    response = put(api, a={"url": "https://example.com/h", "on_success_url": "https://x.io"})
    assert response.status_code == 400
    many = {f"e{i}": {"url": f"https://example.com/{i}"} for i in range(101)}
    assert put(api, **many).status_code == 400
    assert not Topic.objects.exists()


def test_list_pages_by_name_and_is_the_teams_own(api, team, other_team) -> None:
    for name in ("c", "a", "b"):
        assert put(api, name, x={"url": "https://example.com/h"}).status_code == 201
    assert put(client_for(other_team), "zz", x={"url": "https://example.com/h"}).status_code == 201
    first = api.get(URL, {"limit": 2}).json()
    assert [t["name"] for t in first["results"]] == ["a", "b"]
    second = api.get(URL, {"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [t["name"] for t in second["results"]] == ["c"] and second["next_cursor"] is None
    assert api.get(f"{URL}/zz").status_code == 404


def test_an_endpoint_is_added_replaced_and_removed_alone(api, team) -> None:
    put(api, a={"url": "https://example.com/a"})
    url = f"{URL}/orders/endpoints/b"
    response = api.put(url, {"url": "https://example.com/b", "method": "PUT"}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["method"] == "PUT"
    assert api.put(url, {"url": "https://example.com/b2"}, format="json").status_code == 200
    assert api.get(url).json()["url"] == "https://example.com/b2"
    assert [e["id"] for e in api.get(f"{URL}/orders").json()["endpoints"]] == ["a", "b"]
    assert api.delete(url).status_code == 204
    assert api.get(url).status_code == 404
    assert api.delete(url).status_code == 404
    missing = api.put(f"{URL}/nope/endpoints/b", {"url": "https://example.com/b"}, format="json")
    assert missing.status_code == 404


def test_disable_pauses_the_delivery_key_and_enable_resumes_it(api, team) -> None:
    put(api, a={"url": "https://example.com/a"})
    response = api.post(f"{URL}/orders/endpoints/a/disable", {"reason": "500s"}, format="json")
    body = response.json()
    assert response.status_code == 200, body
    assert body["state"] == "disabled" and body["disabled_reason"] == "500s"
    assert body["disabled_at"] is not None
    assert FlowControl.objects.get(key="topic:orders:a").paused is True
    body = api.post(f"{URL}/orders/endpoints/a/enable").json()
    assert body["state"] == "enabled" and body["disabled_at"] is None
    assert FlowControl.objects.get(key="topic:orders:a").paused is False
    # A PUT may set the state too.
    put(api, a={"url": "https://example.com/a", "state": "disabled"})
    assert FlowControl.objects.get(key="topic:orders:a").paused is True


def test_delete_removes_the_topic(api, team) -> None:
    put(api, a={"url": "https://example.com/a"})
    assert api.delete(f"{URL}/orders").status_code == 204
    assert api.get(f"{URL}/orders").status_code == 404
    assert api.delete(f"{URL}/orders").status_code == 404


def test_a_job_and_a_bulk_item_may_name_a_topic_exactly_one_target(api, team) -> None:
    due = iso_utc(db_now() + timedelta(hours=1))
    response = api.post("/api/v1/jobs", {"due_at": due, "topic": "orders"}, format="json")
    body = response.json()
    assert response.status_code == 201, body
    assert body["topic"] == "orders" and body["callback_url"] is None
    assert body["deliveries"] is None and body["status"] == "pending"
    assert Job.objects.get(id=body["id"]).target_kind == "topic"
    both = api.post(
        "/api/v1/jobs",
        {"due_at": due, "topic": "orders", "callback_url": "https://example.com/h"},
        format="json",
    )
    assert both.status_code == 400
    assert set(error_of(both)["fields"]) == {"topic", "callback_url"}
    bad = api.post("/api/v1/jobs", {"due_at": due, "topic": "no/slash"}, format="json")
    assert bad.status_code == 400 and "topic" in error_of(bad)["fields"]
    bulk = api.post(
        "/api/v1/jobs/bulk",
        {"jobs": [{"due_at": due, "topic": "orders"}, {"due_at": due, "handler": "noop"}]},
        format="json",
    )
    assert bulk.status_code == 201, bulk.json()
    kinds = {Job.objects.get(id=j["id"]).target_kind for j in bulk.json()["jobs"]}
    assert kinds == {"topic", "handler"}
    two = api.post(
        "/api/v1/jobs/bulk",
        {"jobs": [{"due_at": due, "topic": "orders", "handler": "noop"}]},
        format="json",
    )
    assert two.status_code == 400


def test_a_schedule_may_name_a_topic(api, team) -> None:
    response = api.post(
        "/api/v1/schedules", {"cron": "0 9 * * *", "topic": "orders"}, format="json"
    )
    body = response.json()
    assert response.status_code == 201, body
    assert body["topic"] == "orders" and body["callback_url"] is None and body["handler"] is None
    patched = api.patch(
        f"/api/v1/schedules/{body['id']}", {"handler": "noop"}, format="json"
    ).json()
    assert patched["topic"] is None and patched["handler"] == "noop"
    both = api.post(
        "/api/v1/schedules",
        {"cron": "0 9 * * *", "topic": "orders", "handler": "noop"},
        format="json",
    )
    assert both.status_code == 400 and set(error_of(both)["fields"]) == {"topic", "handler"}


def test_a_patch_changes_only_what_it_gives_and_keeps_the_header_values(api, team) -> None:
    from scheduling.jobs.requests import headers_unsealed

    put(api, a={"url": "https://example.com/a", "headers": {"X-Key": "k1"}, "format": "payload"})
    url = f"{URL}/orders/endpoints/a"
    response = api.patch(
        url, {"url": "https://example.com/a2", "timeout_seconds": 7}, format="json"
    )
    body = response.json()
    assert response.status_code == 200, body
    assert body["url"] == "https://example.com/a2" and body["timeout_seconds"] == 7
    assert body["headers"] == {"X-Key": "********"} and body["format"] == "payload"
    stored = Topic.objects.get().endpoints.get(name="a").request
    assert headers_unsealed(stored) == {"X-Key": "k1"}
    assert api.patch(url, {"state": "disabled"}, format="json").json()["state"] == "disabled"
    assert FlowControl.objects.get(key="topic:orders:a").paused is True
    bad = api.patch(url, {"url": "http://10.0.0.1/x"}, format="json")
    assert bad.status_code == 400
    assert api.patch(f"{URL}/orders/endpoints/nope", {}, format="json").status_code == 404
