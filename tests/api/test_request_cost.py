"""What one API request costs in SQL statements (key cache warm, as in steady traffic)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.sharding.clock import db_now

pytestmark = pytest.mark.django_db


def statements(call) -> list[str]:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as queries:
        response = call()
    assert response.status_code < 300, response.content
    return [q["sql"] for q in queries if "SAVEPOINT" not in q["sql"]]


def test_one_job_is_one_insert_without_begin_or_commit(api) -> None:
    due = (db_now() + timedelta(hours=1)).isoformat()
    body = {"due_at": due, "handler": "noop", "payload": {"n": 1}}
    sql = statements(lambda: api.post("/api/v1/jobs", body, format="json"))
    writes = [s for s in sql if "scheduling_job " in s or 'scheduling_job"' in s]
    if connection.vendor == "postgresql":
        assert len(writes) == 1 and "INSERT INTO scheduling_job " in writes[0], sql
        assert not [s for s in sql if s in ("BEGIN", "COMMIT")], sql


def test_single_job_calls_cost_a_few_statements(api) -> None:
    due = (db_now() + timedelta(hours=1)).isoformat()
    body = {"due_at": due, "handler": "noop", "payload": {"n": 1}}
    pg = connection.vendor == "postgresql"
    first = api.post("/api/v1/jobs", body, format="json")  # warms the key cache and the bucket
    assert first.status_code == 201
    job_id = first.json()["id"]

    # Each: the budget's one counting statement, then the work itself. A create on
    # PostgreSQL: the budget (which also reads the clock), the bucket's count, one
    # INSERT (no BEGIN or COMMIT around it). The count is cached once a write commits,
    # which never happens inside a test's transaction: steady traffic sends 2
    # (tests/integration/test_prepared_direct.py).
    bounds = {
        "create": (lambda: api.post("/api/v1/jobs", body, format="json"), 3),
        # A read on PostgreSQL counts and reads in one statement; on SQLite, two.
        "read": (lambda: api.get(f"/api/v1/jobs/{job_id}"), 1 if pg else 2),
        "attempts": (lambda: api.get(f"/api/v1/jobs/{job_id}/attempts"), 3),
        "list": (lambda: api.get("/api/v1/jobs"), 2),
        # A change also takes the shard's window lock and looks for the job in flight
        # (two statements on PostgreSQL: the look must see what committed before the
        # lock was granted; docs/pollers.md, "In flight").
        "patch": (lambda: api.patch(f"/api/v1/jobs/{job_id}", {"due_at": due}, format="json"), 7),
        "cancel": (lambda: api.post(f"/api/v1/jobs/{job_id}/cancel"), 6),
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
