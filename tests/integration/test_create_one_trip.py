"""A single-job create's count and INSERT in one round trip (scheduling/api/jobs/fastpath.py,
``prepared.prepared_pipeline``, ``services.job_write_one``).

PostgreSQL outside a test transaction, as a request runs (the pipeline is there only
in autocommit). The bucket's shard count is cached by a first create, as in steady
traffic; each test then checks what the one-trip create wrote, or that a guard that
did not hold left the decision to the database's clock.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import DataError, connection
from django.test import override_settings

from scheduling import conf, keys
from scheduling.api.access import ratelimit
from scheduling.api.jobs import fastpath
from scheduling.jobs import services
from scheduling.models import Job, ThrottleCounter
from scheduling.sharding.buckets import shard_count_of, shard_counts_record
from scheduling.sharding.clock import db_now, iso_utc, open_bucket
from scheduling.storage import prepared
from tests.support import procs
from tests.support.api import error_of, job_body

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="libpq's pipeline mode: PostgreSQL"
    ),
]

URL = "/api/v1/jobs"


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """What went to libpq from now on: pipelines (their statements) and single statements."""
    seen: dict[str, list[Any]] = {"pipelines": [], "single": []}
    pipeline, single = prepared._pq_pipeline, prepared._pq_fetchone

    def pipeline_spy(raw: Any, statements: Any) -> Any:
        seen["pipelines"].append([sql for sql, _ in statements])
        return pipeline(raw, statements)

    def single_spy(raw: Any, sql: str, params: Any) -> Any:
        seen["single"].append(sql)
        return single(raw, sql, params)

    monkeypatch.setattr(prepared, "_pq_pipeline", pipeline_spy)
    monkeypatch.setattr(prepared, "_pq_fetchone", single_spy)
    return seen


@pytest.fixture(autouse=True)
def day_budget(settings) -> None:  # type: ignore[no-untyped-def]
    """A day's window, so no test's counts straddle a window's end (a minute's would)."""
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"jobs": "100000/day"},
    }


@pytest.fixture
def warm(api) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """A first create (its bucket's shard count recorded and cached): its body."""
    body = job_body(in_seconds=3600)
    assert api.post(URL, body, format="json").status_code == 201
    return body


def _count_of(team: Any) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count FROM scheduling_throttlecounter WHERE key = %s",
            [f"throttle_jobs_{team.pk}"],
        )
        return cursor.fetchone()[0]


def dt(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _local_clock(monkeypatch: pytest.MonkeyPatch, offset: timedelta) -> None:
    """This process's clock ``offset`` away from the database's, for the create."""
    skew = db_now() - fastpath.timezone.now() + offset
    real_now = fastpath.timezone.now
    monkeypatch.setattr(fastpath.timezone, "now", lambda: real_now() + skew)


def test_in_steady_traffic_a_create_is_one_round_trip(api, team, warm, trips) -> None:
    before = db_now()
    response = api.post(URL, warm, format="json")
    after = db_now()
    assert response.status_code == 201
    assert trips["single"] == []
    ((count_sql, insert_sql),) = trips["pipelines"]
    assert "scheduling_throttlecounter" in count_sql and "INSERT INTO scheduling_job" in insert_sql
    job = Job.objects.get(id=response.json()["id"])
    assert before <= job.created_at == job.updated_at <= after
    assert job.bucket == keys.bucket_of(job.due_at, conf.bucket_seconds())
    assert job.shard == keys.shard_of(job.id, shard_count_of(job.bucket))
    body = response.json()
    assert body["created_at"] == iso_utc(job.created_at) == body["updated_at"]
    assert body["bucket"] == iso_utc(job.bucket) and body["shard"] == job.shard
    assert response["Location"].endswith(f"{URL}/{job.id}")
    assert _count_of(team) == 2


def test_the_answer_is_drf_s(api, warm, trips) -> None:
    body = {**warm, "metadata": {"a": "b"}, "expires_after_seconds": 60}
    one_trip = api.post(URL, body, format="json")
    with override_settings(SENDLATER_API_FASTPATH=False):
        through_drf = api.post(URL, body, format="json")
    assert len(trips["pipelines"]) == 1
    assert one_trip.status_code == through_drf.status_code == 201
    varying = {"id", "created_at", "updated_at", "shard"}
    a, b = one_trip.json(), through_drf.json()
    assert {k: v for k, v in a.items() if k not in varying} == {
        k: v for k, v in b.items() if k not in varying
    }
    assert set(a) == set(b)
    for job_id, answer in ((a["id"], one_trip), (b["id"], through_drf)):
        assert answer.json() == _body_of(Job.objects.get(id=job_id))
    varying_headers = {"Location", "Content-Length"}  # (ids, times and shards vary)
    headers = {k: v for k, v in one_trip.items() if k not in varying_headers}
    assert headers == {k: v for k, v in through_drf.items() if k not in varying_headers}


def _body_of(job: Job) -> dict[str, Any]:
    from scheduling.api.jobs.bodies import job_body as rendered

    return rendered(job)


def test_over_budget_writes_nothing_and_answers_429(api, team, warm, trips) -> None:
    four = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"jobs": "4/day"}}
    with override_settings(REST_FRAMEWORK=four):
        statuses = [api.post(URL, warm, format="json").status_code for _ in range(3)]
        refused = api.post(URL, warm, format="json")
    assert statuses == [201, 201, 201]  # the warm-up spent one of the four
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert error_of(refused)["code"] == "throttled"
    assert len(trips["pipelines"]) == 4  # every one went in one trip
    assert Job.objects.count() == 4  # the warm-up's and three more
    assert _count_of(team) == 5  # each request counted once


@pytest.mark.parametrize("buckets", [-2, 2])
def test_a_clock_a_bucket_off_leaves_the_bucket_to_the_database_s(
    api, team, warm, trips, monkeypatch, buckets
) -> None:
    width = conf.bucket_seconds()
    _local_clock(monkeypatch, timedelta(seconds=buckets * width))
    before = db_now()
    due = before - timedelta(seconds=1.5 * width)  # a bucket that is past by either clock
    # The bucket this process's clock picks has its count cached, so the INSERT is sent.
    local_pick = max(keys.bucket_of(due, width), open_bucket(fastpath.timezone.now()))
    shard_counts_record({local_pick})
    response = api.post(URL, {**job_body(), "due_at": iso_utc(due)}, format="json")
    assert response.status_code == 201
    assert len(trips["pipelines"]) == 1  # sent, but its INSERT wrote nothing
    job = Job.objects.get(id=response.json()["id"])
    assert job.bucket in (open_bucket(before), open_bucket(db_now()))  # the late-write rule
    assert job.created_at >= before
    assert Job.objects.count() == 2 and _count_of(team) == 2  # written once, counted once


def test_the_horizon_s_edge_is_the_database_clock_s(team) -> None:
    # (Through the API the request's fields stop two days short of the horizon.)
    now, horizon, width = db_now(), conf.max_horizon(), conf.bucket_seconds()

    def spec_due(due: datetime) -> services.JobSpec:
        shard_counts_record({keys.bucket_of(due, width)})
        return services.JobSpec(due_at=due, target_kind="handler", target="noop")

    beyond = spec_due(now + horizon + timedelta(minutes=30))
    write = services.job_write_one(team=team, spec=beyond, now=now + timedelta(hours=1))
    assert write is not None  # within the horizon by a clock an hour ahead
    assert prepared.prepared_pipeline([(write.sql, write.params)]) == [None]  # wrote nothing
    inside = spec_due(now + horizon - timedelta(minutes=30))
    assert services.job_write_one(team=team, spec=inside, now=now - timedelta(hours=1)) is None
    write = services.job_write_one(team=team, spec=inside, now=now)
    assert write is not None
    ((created_at,),) = prepared.prepared_pipeline([(write.sql, write.params)])
    assert created_at >= now
    assert list(Job.objects.values_list("id", flat=True)) == [write.job.id]


def test_a_failed_count_whose_insert_wrote_answers_the_job(
    api, warm, trips, monkeypatch, caplog
) -> None:
    monkeypatch.setattr(ratelimit, "counting", lambda key, window: ("SELECT 1 / 0", []))
    with caplog.at_level(logging.WARNING, logger="scheduling.api.jobs.fastpath"):
        response = api.post(URL, warm, format="json")
    assert response.status_code == 201  # the job exists: its guard read the budget as spent 1
    assert Job.objects.filter(id=response.json()["id"]).exists()
    assert "count failed" in caplog.text


def test_a_failed_count_whose_insert_did_not_write_is_an_error(api, team, warm, monkeypatch):
    monkeypatch.setattr(ratelimit, "counting", lambda key, window: ("SELECT 1 / 0", []))
    # No counter row (the warm-up's is gone): the guard finds no count within the
    # budget, as for a request whose count was not made. (An hour's window alone is not
    # enough: from 23:00 UTC it ends with the day's, and the day's row counts.)
    ThrottleCounter.objects.all().delete()
    hourly = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"jobs": "100/hour"}}
    with override_settings(REST_FRAMEWORK=hourly), pytest.raises(DataError):
        api.post(URL, warm, format="json")  # (the test client raises what answers 500)
    assert Job.objects.count() == 1


def test_an_insert_error_after_the_count_is_answered_counted(api, team, warm, monkeypatch):
    def failing(job: Job, **_: Any) -> tuple[str, list[object]]:
        return "SELECT 1 / 0 FROM scheduling_job WHERE id = %s", [job.id]

    monkeypatch.setattr(services, "insert_one_guarded", failing)
    with pytest.raises(DataError):
        api.post(URL, warm, format="json")  # (the test client raises what answers 500)
    assert Job.objects.count() == 1 and _count_of(team) == 2  # counted, nothing written


def test_statements_the_session_lost_are_prepared_again(api, team, warm, trips) -> None:
    assert api.post(URL, warm, format="json").status_code == 201
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    response = api.post(URL, warm, format="json")
    assert response.status_code == 201
    assert len(trips["pipelines"]) == 2
    assert len(trips["single"]) == 2  # each run again on its own, once
    assert Job.objects.count() == 3 and _count_of(team) == 3


def test_a_pipeline_answers_each_statement_in_its_own_transaction() -> None:
    outcomes = prepared.prepared_pipeline(
        [
            ("SELECT %s::int", [1]),
            ("SELECT 1 / 0", []),
            ("SELECT %s::int", [5]),
            ("SET x.y = 1", []),
        ]
    )
    assert outcomes is not None
    assert outcomes[0] == (1,) and outcomes[2] == (5,) and outcomes[3] is None
    assert isinstance(outcomes[1], DataError)  # Django's class, as a cursor raises it
    assert prepared.prepared_fetchone("SELECT %s::int", [7]) == (7,)  # the session is fine


def test_inside_a_transaction_nothing_is_sent() -> None:
    from django.db import transaction

    with transaction.atomic():
        assert prepared.prepared_pipeline([("SELECT 1", [])]) is None


def test_a_job_built_for_the_one_trip_insert_is_the_classic_one(team) -> None:
    due = db_now() + timedelta(hours=1)
    spec = services.JobSpec(due_at=due, target_kind="handler", target="noop")
    job, _ = services.job_schedule(team=team, **vars(spec))  # the bucket's count, cached
    write = services.job_write_one(team=team, spec=spec, now=db_now())
    assert write is not None
    assert set(vars(write.job)) == set(vars(job))  # the same fields, built the same way
    for name in ("team_id", "due_at", "bucket", "status", "target_kind", "target", "payload"):
        assert getattr(write.job, name) == getattr(job, name), name
    too_early = due - conf.max_horizon() - timedelta(days=1)  # beyond the horizon by it
    assert services.job_write_one(team=team, spec=spec, now=too_early) is None
    keyed = services.JobSpec(**{**vars(spec), "idempotency_key": "k"})
    assert services.job_write_one(team=team, spec=keyed, now=db_now()) is None


def test_a_lost_connection_answers_503_and_the_next_create_reconnects(api, warm, trips) -> None:
    pid = connection.connection.info.backend_pid
    with psycopg.connect(procs.test_database_url(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    lost = api.post(URL, warm, format="json")
    assert lost.status_code == 503 and lost["Retry-After"]
    assert len(trips["pipelines"]) == 1
    assert api.post(URL, warm, format="json").status_code == 201
    assert Job.objects.count() == 2
