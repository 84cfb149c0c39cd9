"""Prepared statements sent straight through libpq (scheduling/storage/prepared.py).

PostgreSQL, outside a test transaction: the direct path is taken in autocommit only,
as a request runs.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import IntegrityError, OperationalError, connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from scheduling import conf, keys
from scheduling.api.access import ratelimit
from scheduling.models import Job
from scheduling.sharding.clock import db_now
from scheduling.storage import jobinsert, prepared
from scheduling.storage.failover import connection_discard, is_failover_error
from tests.support import procs
from tests.support.api import job_body

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="prepared statements through libpq: PostgreSQL"
    ),
]

URL = "/api/v1/jobs"


@pytest.fixture
def direct_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements that went straight through libpq from now on."""
    seen: list[str] = []
    original = prepared._pq_fetchone

    def spy(raw: Any, sql: str, params: Any) -> Any:
        seen.append(sql)
        return original(raw, sql, params)

    monkeypatch.setattr(prepared, "_pq_fetchone", spy)
    return seen


def test_a_statement_in_autocommit_goes_through_libpq_with_the_cursor_s_answer(
    direct_calls: list[str],
) -> None:
    first = ratelimit.count_request("k-direct", 10, 60)
    second = ratelimit.count_request("k-direct", 10, 60)
    assert (first[0], second[0]) == (1, 2)
    assert first[1] is not None and first[1].tzinfo is not None
    assert len(direct_calls) == 2
    with connection.cursor() as cursor:  # the same statement through Django's cursor
        cursor.execute(ratelimit._COUNT_SQL_WITH_CLOCK, ["k-direct", 10])
        assert cursor.fetchone()[0] == 3


def test_inside_a_transaction_the_statement_goes_through_the_cursor(direct_calls) -> None:
    from django.db import transaction

    with transaction.atomic():
        assert ratelimit.count_request("k-atomic", 10, 60)[0] == 1
    assert direct_calls == []


def test_a_job_row_reads_the_same_both_ways(api, direct_calls) -> None:
    body = job_body(payload={"f": 1.5, "s": "é"}, metadata={"a": "b"}, expires_after_seconds=60)
    job_id = api.post(URL, body, format="json").json()["id"]
    direct = ratelimit.count_request_and_read_job("k-read", 10, uuid.UUID(job_id))[1]
    assert direct_calls  # (and the create above went directly too)
    assert direct is not None
    through_orm = Job.objects.get(id=job_id)
    for field in Job._meta.concrete_fields:
        assert getattr(direct, field.attname) == getattr(through_orm, field.attname), field.name


def test_errors_arrive_as_django_s(api) -> None:
    job = Job.objects.get(id=api.post(URL, job_body(), format="json").json()["id"])
    (row,) = jobinsert._rows([job])
    with pytest.raises(IntegrityError):  # the same id again
        jobinsert._insert_one(row)  # (its one prepared INSERT)
    assert connection.connection is not None  # a unique violation leaves it usable
    assert ratelimit.count_request("k-after", 10, 60)[0] == 1


def test_a_session_that_lost_its_statements_prepares_them_again(direct_calls) -> None:
    assert ratelimit.count_request("k-dealloc", 10, 60)[0] == 1
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    assert ratelimit.count_request("k-dealloc", 10, 60)[0] == 2
    assert len(direct_calls) == 2


def test_a_lost_connection_is_a_failover_error_and_the_next_statement_reconnects() -> None:
    ratelimit.count_request("k-lost", 10, 60)
    pid = connection.connection.info.backend_pid
    with psycopg.connect(procs.test_database_url(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    with pytest.raises(OperationalError) as lost:
        ratelimit.count_request("k-lost", 10, 60)
    assert is_failover_error(lost.value)
    connection_discard()
    assert ratelimit.count_request("k-lost", 10, 60)[0] == 2


def test_a_create_is_two_statements_through_libpq(api, direct_calls) -> None:
    before = db_now()
    response = api.post(URL, job_body(in_seconds=3600), format="json")
    assert response.status_code == 201
    job = Job.objects.get(id=response.json()["id"])
    assert before <= job.created_at == job.updated_at <= db_now()
    assert job.bucket == keys.bucket_of(job.due_at, conf.bucket_seconds())
    assert ["scheduling_throttlecounter" in sql for sql in direct_calls] == [True, False]
    assert "INSERT INTO scheduling_job" in direct_calls[1]


def test_in_steady_traffic_a_create_is_two_statements_and_a_read_one(api) -> None:
    body = job_body(in_seconds=3600)
    api.post(URL, body, format="json")  # the bucket's count, cached
    with CaptureQueriesContext(connection) as create:
        job_id = api.post(URL, body, format="json").json()["id"]
    with CaptureQueriesContext(connection) as read:
        assert api.get(f"{URL}/{job_id}").status_code == 200
    assert len(create) == 2, create.captured_queries  # the budget (and clock), the INSERT
    assert len(read) == 1, read.captured_queries  # the budget and the row


def test_each_create_counts_once_and_a_refused_one_writes_nothing(api) -> None:
    two = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"jobs": "2/hour"}}
    with override_settings(REST_FRAMEWORK=two):
        statuses = [api.post(URL, job_body(), format="json").status_code for _ in range(3)]
    assert statuses == [201, 201, 429]
    assert Job.objects.count() == 2
