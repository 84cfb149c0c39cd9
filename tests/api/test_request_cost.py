"""What one API request costs in SQL statements (key cache warm, as in steady traffic)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.clock import db_now

pytestmark = pytest.mark.django_db


def statements(call) -> list[str]:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as queries:
        response = call()
    assert response.status_code < 300, response.content
    return [q["sql"] for q in queries if "SAVEPOINT" not in q["sql"]]


def test_single_job_calls_cost_a_few_statements(api) -> None:
    due = (db_now() + timedelta(hours=1)).isoformat()
    body = {"due_at": due, "handler": "noop", "payload": {"n": 1}}
    first = api.post("/api/v1/jobs", body, format="json")  # warms the key cache and the bucket
    assert first.status_code == 201
    job_id = first.json()["id"]

    # Each: the budget's one counting statement, then the work itself.
    bounds = {
        "create": (lambda: api.post("/api/v1/jobs", body, format="json"), 4),
        "read": (lambda: api.get(f"/api/v1/jobs/{job_id}"), 2),
        "attempts": (lambda: api.get(f"/api/v1/jobs/{job_id}/attempts"), 3),
        "list": (lambda: api.get("/api/v1/jobs"), 2),
        "patch": (lambda: api.patch(f"/api/v1/jobs/{job_id}", {"due_at": due}, format="json"), 5),
        "cancel": (lambda: api.post(f"/api/v1/jobs/{job_id}/cancel"), 4),
    }
    for name, (call, most) in bounds.items():
        sql = statements(call)
        assert len(sql) <= most, (name, sql)
        assert "scheduling_apikey" not in " ".join(sql), name  # the key came from memory


def test_a_revoked_key_stops_working_within_the_cache_bound(api, settings) -> None:
    """Another process revoked the key (a database write this process did not see):
    the cached key serves until SENDLATER_API_KEY_CACHE_SECONDS, then 401."""
    import time

    from scheduling.models import ApiKey

    settings.SENDLATER_API_KEY_CACHE_SECONDS = 0.5
    assert api.get("/api/v1/jobs").status_code == 200
    ApiKey.objects.update(revoked_at=db_now())  # as if revoked elsewhere
    assert api.get("/api/v1/jobs").status_code == 200  # within the bound: still cached
    time.sleep(0.6)
    assert api.get("/api/v1/jobs").status_code == 401
    assert api.get("/api/v1/jobs").status_code == 401
