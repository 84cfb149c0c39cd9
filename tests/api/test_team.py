"""GET/PATCH /api/v1/team: the team's retry defaults and default failure callback."""

from __future__ import annotations

import pytest

from tests.support.api import error_of

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _allow_loopback(settings):
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    settings.SENDLATER_MAX_ATTEMPTS = 10


def test_read_set_and_clear_the_defaults(api, team) -> None:
    body = api.get("/api/v1/team").json()
    assert body["slug"] == team.slug and body["retry"] is None
    assert body["default_on_failure_url"] is None
    assert body["service_retry"]["max_attempts"] == 10
    changed = api.patch(
        "/api/v1/team",
        {"retry": {"max_attempts": 3}, "default_on_failure_url": "http://127.0.0.1:9/dead"},
        format="json",
    )
    assert changed.status_code == 200, changed.content
    assert changed.json()["retry"] == {"max_attempts": 3}
    assert api.get("/api/v1/team").json()["default_on_failure_url"] == "http://127.0.0.1:9/dead"
    # What a PATCH does not give stays; null clears.
    kept = api.patch("/api/v1/team", {"default_on_failure_url": None}, format="json").json()
    assert kept["retry"] == {"max_attempts": 3} and kept["default_on_failure_url"] is None
    assert api.patch("/api/v1/team", {"retry": None}, format="json").json()["retry"] is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"retry": {"max_attempts": 51}}, "retry.max_attempts"),
        (
            {"retry": {"min_backoff_seconds": 9, "max_backoff_seconds": 8}},
            "retry.max_backoff_seconds",
        ),
        ({"default_on_failure_url": "http://10.0.0.1/x"}, "default_on_failure_url"),
        ({"name": "renamed"}, "name"),
    ],
)
def test_bad_defaults_are_400s_naming_the_field(api, body, field) -> None:
    response = api.patch("/api/v1/team", body, format="json")
    assert response.status_code == 400
    assert field in error_of(response)["fields"], error_of(response)


def test_each_team_sees_its_own(api, other_api) -> None:
    api.patch("/api/v1/team", {"retry": {"max_attempts": 2}}, format="json")
    assert other_api.get("/api/v1/team").json()["retry"] is None
