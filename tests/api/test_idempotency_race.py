"""Two concurrent identical requests with one idempotency key create one job."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections

from scheduling.jobs import services
from scheduling.models import Job
from tests.support.api import client_for, job_body
from tests.support.factories import team_create

ROUNDS = 5


def _post_concurrently(clients: list[Any], body: dict[str, Any]) -> list[tuple[int, str]]:
    """POST ``body`` from every client at once (one thread each); (status, id) each."""
    start = threading.Barrier(len(clients))
    results: list[tuple[int, str]] = []
    errors: list[BaseException] = []

    def post(client: Any) -> None:
        try:
            start.wait(timeout=10)
            response = client.post("/api/v1/jobs", body, format="json")
            results.append((response.status_code, response.json().get("id", "")))
        except BaseException as error:  # reported below, not lost in the thread
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return results


@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_requests_create_one_job() -> None:
    team = team_create(slug="acme")
    clients = [client_for(team), client_for(team)]
    for round_ in range(ROUNDS):
        body = job_body(idempotency_key=f"race-{round_}", payload={"round": round_})
        results = _post_concurrently(clients, body)
        assert sorted(status for status, _ in results) == [200, 201], results
        assert len({job_id for _, job_id in results}) == 1
        assert Job.objects.filter(idempotency_key=f"race-{round_}").count() == 1
    assert Job.objects.count() == ROUNDS


@pytest.mark.django_db(transaction=True)
def test_forced_interleaving_on_postgres_replays_after_the_unique_violation(monkeypatch) -> None:
    """Both requests read "no such key" before either inserts: the loser's INSERT
    hits the unique constraint, and the service replays it against the winner."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serializes writers at BEGIN; the interleaving cannot happen")
    team = team_create(slug="acme")
    both_read = threading.Barrier(2)
    waited: set[int] = set()
    real_resolve = services._resolve_idempotency

    def resolve_then_wait(team_, specs):
        result = real_resolve(team_, specs)
        if threading.get_ident() not in waited:  # the retry must not wait again
            waited.add(threading.get_ident())
            both_read.wait(timeout=10)
        return result

    monkeypatch.setattr(services, "_resolve_idempotency", resolve_then_wait)
    body = job_body(idempotency_key="forced", payload={"x": 1})
    results = _post_concurrently([client_for(team), client_for(team)], body)
    assert sorted(status for status, _ in results) == [200, 201], results
    assert len({job_id for _, job_id in results}) == 1
    assert Job.objects.filter(idempotency_key="forced").count() == 1
