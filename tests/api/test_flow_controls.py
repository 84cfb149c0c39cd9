"""The flow-control API: set, read, list, delete, pause and resume a team's key limits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest
import time_machine
from django.conf import settings
from django.core.cache import cache
from django.test import override_settings

from scheduling.flow.models import FlowControl, FlowSlot
from scheduling.jobs.services import job_schedule
from scheduling.sharding.clock import db_now
from tests.support.api import error_of

pytestmark = pytest.mark.django_db

URL = "/api/v1/flow-controls"
KEY = "partner"
BODY_FIELDS = [
    "key",
    "rate",
    "period_seconds",
    "parallelism",
    "paused",
    "waiting",
    "in_flight",
    "delivered_in_period",
    "created_at",
    "updated_at",
]


def put(api, key: str = KEY, **body):
    return api.put(f"{URL}/{quote(key, safe='')}", body, format="json")


def test_put_creates_then_replaces(api, team) -> None:
    response = put(api, rate=100, parallelism=10)
    body = response.json()
    assert response.status_code == 201, body
    assert response["Location"] == f"{URL}/{KEY}"
    assert list(body) == BODY_FIELDS
    assert body["key"] == KEY and body["rate"] == 100 and body["parallelism"] == 10
    assert body["period_seconds"] == 1  # the default
    assert body["paused"] is False
    assert (body["waiting"], body["in_flight"], body["delivered_in_period"]) == (0, 0, 0)
    assert body["created_at"].endswith("Z") and body["updated_at"].endswith("Z")
    # A PUT replaces: what it does not give is no longer limited.
    response = put(api, rate=5, period_seconds=60)
    body = response.json()
    assert response.status_code == 200, body
    assert (body["rate"], body["period_seconds"], body["parallelism"]) == (5, 60, None)
    response = put(api, parallelism=3)
    assert response.status_code == 200
    assert (response.json()["rate"], response.json()["parallelism"]) == (None, 3)
    flow = FlowControl.objects.get(team=team, key=KEY)
    assert (flow.rate, flow.period_seconds, flow.parallelism) == (None, 1, 3)


def test_get_list_and_delete(api) -> None:
    assert api.get(f"{URL}/{KEY}").status_code == 404
    assert error_of(api.get(f"{URL}/{KEY}"))["code"] == "not_found"
    for key in ("b", "a", "c"):
        put(api, key=key, rate=1)
    assert api.get(f"{URL}/a").json()["key"] == "a"
    listed = api.get(URL).json()
    assert [f["key"] for f in listed["results"]] == ["a", "b", "c"]
    assert listed["next_cursor"] is None and listed["next"] is None
    response = api.delete(f"{URL}/b")
    assert response.status_code == 204
    assert api.get(f"{URL}/b").status_code == 404
    assert api.delete(f"{URL}/b").status_code == 404
    assert [f["key"] for f in api.get(URL).json()["results"]] == ["a", "c"]


def test_the_list_pages_by_key(api) -> None:
    keys = [f"k{i}" for i in range(5)] + ["é-1", "zz"]
    for key in keys:
        put(api, key=key, parallelism=1)
    seen, url = [], f"{URL}?limit=2"
    while url:
        page = api.get(url).json()
        assert len(page["results"]) <= 2
        seen += [f["key"] for f in page["results"]]
        url = page["next"]
        if url:
            assert page["next_cursor"] and page["next_cursor"] in url
    assert sorted(seen) == sorted(keys) and len(seen) == len(set(seen))
    response = api.get(URL, {"cursor": "not-hex"})
    assert response.status_code == 400 and "cursor" in error_of(response)["fields"]
    # Any value of the cursor's shape is a position, even bytes that are no UTF-8.
    assert api.get(URL, {"cursor": "ff"}).status_code == 200
    assert api.get(URL, {"cursor": "00"}).status_code == 200  # NUL: no key has one
    assert [f["key"] for f in api.get(URL, {"cursor": "6b3300"}).json()["results"]][:1] == ["k4"]
    assert api.get(URL, {"limit": 0}).status_code == 400


def test_pause_and_resume(api, team) -> None:
    # Pausing a key without limits records it, paused, without limits.
    response = api.post(f"{URL}/{KEY}/pause")
    body = response.json()
    assert response.status_code == 200, body
    assert body["paused"] is True and body["rate"] is None and body["parallelism"] is None
    # Limits set later keep the pause; a second pause changes nothing.
    assert put(api, rate=10).json()["paused"] is True
    assert api.post(f"{URL}/{KEY}/pause").json()["paused"] is True
    response = api.post(f"{URL}/{KEY}/resume")
    assert response.status_code == 200
    assert response.json()["paused"] is False and response.json()["rate"] == 10
    assert api.post(f"{URL}/{KEY}/resume").json()["paused"] is False
    response = api.post(f"{URL}/unknown/resume")
    assert response.status_code == 404 and error_of(response)["code"] == "not_found"
    assert not FlowControl.objects.filter(team=team, key="unknown").exists()


def test_the_body_shows_the_live_state(api, team) -> None:
    now = db_now()
    for minutes in (-3, -2, -1, 30):  # three due, one later
        job_schedule(
            team=team,
            due_at=now + timedelta(minutes=minutes),
            target_kind="handler",
            target="noop",
            flow_control_key=KEY,
        )
    job_schedule(
        team=team,
        due_at=now - timedelta(minutes=1),
        target_kind="handler",
        target="noop",
        flow_control_key="other",
    )
    put(api, rate=10, parallelism=5)
    flow = FlowControl.objects.get(team=team, key=KEY)
    FlowSlot.objects.create(flow=flow, poller="p1", slots=2, expires_at=now + timedelta(minutes=1))
    FlowSlot.objects.create(flow=flow, poller="p2", slots=9, expires_at=now - timedelta(minutes=1))
    FlowControl.objects.filter(pk=flow.pk).update(window_start=now, window_count=4)
    body = api.get(f"{URL}/{KEY}").json()
    # Due and pending: three; two of them in flight (the expired poller's slots do not count).
    assert (body["waiting"], body["in_flight"], body["delivered_in_period"]) == (1, 2, 4)
    assert api.get(URL).json()["results"][0]["waiting"] == 1


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"rate": 0}, {"rate"}),
        ({"rate": -1}, {"rate"}),
        ({"rate": "5"}, {"rate"}),
        ({"rate": 1.5}, {"rate"}),
        ({"rate": True}, {"rate"}),
        ({"rate": None}, {"rate"}),
        ({"parallelism": 0}, {"parallelism"}),
        ({"rate": 1, "period_seconds": 0}, {"period_seconds"}),
        ({"rate": 1, "period_seconds": 86_401}, {"period_seconds"}),
        ({"period_seconds": 10}, {"rate", "parallelism"}),
        ({}, {"rate", "parallelism"}),
        ({"rate": 1, "burst": 3}, {"burst"}),
    ],
)
def test_bad_limits_are_400_naming_the_field(api, body, fields) -> None:
    response = put(api, **body)
    assert response.status_code == 400
    assert set(error_of(response)["fields"]) == fields
    assert not FlowControl.objects.exists()


def test_a_day_is_the_longest_period_and_float_integers_are_integers(api) -> None:
    response = put(api, rate=1000.0, period_seconds=86_400)
    assert response.status_code == 201, response.json()
    assert response.json()["rate"] == 1000


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("get", ""), ("put", ""), ("delete", ""), ("post", "/pause"), ("post", "/resume")],
)
def test_an_over_long_key_in_the_path_is_400_naming_key(api, method, suffix) -> None:
    url = f"{URL}/{'k' * 101}{suffix}"
    response = getattr(api, method)(url, {"rate": 1}, format="json")
    assert response.status_code == 400, response.content
    assert list(error_of(response)["fields"]) == ["key"]
    assert not FlowControl.objects.exists()


def test_a_key_of_100_characters_and_encoded_text_works(api) -> None:
    for key in ("k" * 100, "tenant 42 é ✓", "a?b#c%d"):
        response = put(api, key=key, rate=1)
        assert response.status_code == 201, response.content
        assert response.json()["key"] == key
        assert api.get(f"{URL}/{quote(key, safe='')}").json()["key"] == key
    assert api.get(f"{URL}/a%00b").status_code == 400


def test_teams_never_see_or_change_each_others_keys(api, other_api, team, other_team) -> None:
    assert put(api, rate=100).status_code == 201
    # Team B: the same name is not team A's key.
    assert other_api.get(f"{URL}/{KEY}").status_code == 404
    assert other_api.get(URL).json()["results"] == []
    assert other_api.delete(f"{URL}/{KEY}").status_code == 404
    assert other_api.post(f"{URL}/{KEY}/resume").status_code == 404
    # B's own key of that name is another row: its PUT creates, its pause is its own.
    assert put(other_api, parallelism=1).status_code == 201
    assert other_api.post(f"{URL}/{KEY}/pause").json()["paused"] is True
    mine = api.get(f"{URL}/{KEY}").json()
    assert (mine["rate"], mine["parallelism"], mine["paused"]) == (100, None, False)
    assert other_api.delete(f"{URL}/{KEY}").status_code == 204
    assert api.get(f"{URL}/{KEY}").status_code == 200
    assert FlowControl.objects.filter(team=team).count() == 1
    assert not FlowControl.objects.filter(team=other_team).exists()
    # A's waiting jobs are A's: B's job of the same key is not counted.
    job_schedule(
        team=other_team,
        due_at=db_now() - timedelta(minutes=1),
        target_kind="handler",
        target="noop",
        flow_control_key=KEY,
    )
    assert api.get(f"{URL}/{KEY}").json()["waiting"] == 0


def test_authentication_is_required(client) -> None:
    for response in (
        client.get(URL),
        client.get(f"{URL}/{KEY}"),
        client.put(f"{URL}/{KEY}", {"rate": 1}, content_type="application/json"),
        client.post(f"{URL}/{KEY}/pause"),
    ):
        assert response.status_code == 401
        assert error_of(response)["code"] == "not_authenticated"


LOW = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"jobs": "2/min", "jobs_bulk": "1/min"}}


@override_settings(REST_FRAMEWORK=LOW)
def test_flow_control_calls_share_the_teams_budget(api) -> None:
    cache.clear()
    mid_minute = datetime.now(UTC).replace(second=30, microsecond=0)
    with time_machine.travel(mid_minute, tick=False):
        assert put(api, rate=1).status_code == 201
        assert api.get("/api/v1/jobs").status_code == 200
        response = api.get(URL)
        assert response.status_code == 429 and response["Retry-After"]
