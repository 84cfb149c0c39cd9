"""Per-team throttling: 429 with Retry-After, one budget per team."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine
from django.conf import settings
from django.core.cache import cache
from django.test import override_settings

from tests.support.api import error_of, job_body

pytestmark = pytest.mark.django_db

LOW = {
    **settings.REST_FRAMEWORK,
    "DEFAULT_THROTTLE_RATES": {"jobs": "3/min", "jobs_bulk": "1/min"},
}


@override_settings(REST_FRAMEWORK=LOW)
def test_team_over_its_rate_gets_429_with_retry_after(api, other_api, team) -> None:
    cache.clear()
    # Half-way through a minute, frozen: the whole test is inside one window.
    mid_minute = datetime.now(UTC).replace(second=30, microsecond=0)
    with time_machine.travel(mid_minute, tick=False):
        _spend_and_check(api, other_api, team)


def _spend_and_check(api, other_api, team) -> None:
    statuses = [api.get("/api/v1/jobs").status_code for _ in range(3)]
    assert statuses == [200, 200, 200]
    response = api.post("/api/v1/jobs", job_body(), format="json")
    assert response.status_code == 429
    assert error_of(response)["code"] == "throttled"
    assert response["Retry-After"] == "30"  # the rest of the minute
    # Another key of the same team shares the budget; another team has its own.
    from tests.support.api import client_for

    assert client_for(team).get("/api/v1/jobs").status_code == 429
    assert other_api.get("/api/v1/jobs").status_code == 200
    # Bulk calls have their own, smaller budget.
    bulk = {"jobs": [job_body()]}
    assert other_api.post("/api/v1/jobs/bulk", bulk, format="json").status_code == 201
    assert other_api.post("/api/v1/jobs/bulk", bulk, format="json").status_code == 429
