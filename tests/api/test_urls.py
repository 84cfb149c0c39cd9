"""Answers the router gives before any view: an over-long URL, an unknown API URL."""

from __future__ import annotations

import pytest
from django.test import override_settings

from tests.support.api import error_of

pytestmark = pytest.mark.django_db


@override_settings(SENDLATER_MAX_URL_BYTES=100)
def test_an_over_long_url_is_a_json_414(api) -> None:
    response = api.get("/api/v1/jobs", {"cursor": "x" * 200})
    assert response.status_code == 414
    assert error_of(response)["code"] == "uri_too_long"


@pytest.mark.parametrize("debug", [True, False])
def test_an_unknown_api_url_is_a_json_404_with_debug_on_or_off(api, settings, debug) -> None:
    settings.DEBUG = debug
    for response in (api.get("/api/v1/jobs/not-a-uuid"), api.post("/api/v1/nothing/here")):
        assert response.status_code == 404
        assert error_of(response)["code"] == "not_found"
