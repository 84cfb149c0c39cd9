"""A statement that meets a failover (docs/ha.md) answers 503 with Retry-After."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from unittest import mock

import psycopg
import pytest
from django.db import InternalError, OperationalError

from scheduling.jobs import services
from scheduling.storage import jobinsert
from scheduling.storage.failover import is_failover_error
from tests.support.api import error_of, job_body
from tests.support.procs import ROOT

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs"


def _read_only() -> InternalError:
    """What Django raises for a write on a demoted primary (SQLSTATE 25006)."""
    error = InternalError("cannot execute INSERT in a read-only transaction")
    error.__cause__ = psycopg.errors.ReadOnlySqlTransaction("read-only")
    return error


@pytest.mark.parametrize(
    "error", [OperationalError("server closed the connection unexpectedly"), _read_only()]
)
def test_create_during_failover_is_503_with_retry_after(api, error: Exception) -> None:
    # The job's INSERT fails (its one prepared statement on PostgreSQL, the ORM's
    # INSERT on SQLite).
    with (
        mock.patch.object(jobinsert, "prepared_fetchone", side_effect=error),
        mock.patch.object(services, "jobs_insert", side_effect=error),
    ):
        response = api.post(URL, job_body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert response.status_code == 503
    assert response["Retry-After"] == "2"
    assert error_of(response)["code"] == "unavailable"
    # The next request connects afresh and works.
    assert api.post(URL, job_body(), format="json").status_code == 201


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("method", ["post", "get"])
def test_key_check_during_failover_is_503(api, settings, fast: bool, method: str) -> None:
    """The key check's query (a cache miss) meets the failover: 503 on the fast path
    as on DRF's, never a 500."""
    settings.SENDLATER_API_FASTPATH = fast
    error = OperationalError("server closed the connection unexpectedly")
    with (
        mock.patch("scheduling.api.access.auth.api_key_check", side_effect=error),
        mock.patch("scheduling.api.jobs.fastpath.api_key_check", side_effect=error),
    ):
        if method == "post":
            response = api.post(URL, job_body(), format="json")
        else:
            response = api.get(f"{URL}/00000000-0000-4000-8000-000000000000")
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "2"
    assert error_of(response)["code"] == "unavailable"


def test_other_database_errors_are_not_failovers() -> None:
    assert not is_failover_error(InternalError("division by zero"))
    assert not is_failover_error(ValueError("x"))
    assert is_failover_error(_read_only())


def test_settings_take_a_multi_host_url() -> None:
    code = (
        "from django.conf import settings as s; d = s.DATABASES['default'];"
        "print(d['HOST'], d['PORT'], d['OPTIONS']['target_session_attrs'],"
        " d['OPTIONS']['connect_timeout'], d['CONN_HEALTH_CHECKS'])"
    )
    # The URL `make ha-up` prints for its default ports (scripts/ha.sh url starts nothing).
    env = {k: v for k, v in os.environ.items() if not k.startswith("HA_")}
    url = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ha.sh"), "url"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ports = re.findall(r":(\d+)", url.split("@", 1)[1].split("/", 1)[0])
    env = {**env, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "sendlater_site.settings"}
    out = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        cwd=ROOT,
        env={**env, "SECRET_KEY": env.get("SECRET_KEY") or "test-only"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert ports == ["25433", "25434"]
    assert out == ["127.0.0.1,127.0.0.1", ",".join(ports), "read-write", "5", "True"]
