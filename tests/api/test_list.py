"""Listing: filters and keyset cursor pagination ordered by due_at, then id."""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest

from scheduling.models import Job, JobStatus
from scheduling.sharding.clock import db_now
from tests.support.api import error_of, iso, job_body

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs"


def _schedule(api, dues, **extra):
    jobs = [job_body(due_at=iso(d), **extra) for d in dues]
    response = api.post(f"{URL}/bulk", {"jobs": jobs}, format="json")
    assert response.status_code == 201
    return [j["id"] for j in response.json()["jobs"]]


def _all_pages(api, params):
    seen, pages, cursor = [], 0, None
    while True:
        query = dict(params, **({"cursor": cursor} if cursor else {}))
        response = api.get(URL, query)
        assert response.status_code == 200, response.json()
        body = response.json()
        seen += body["results"]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            assert body["next"] is None
            return seen, pages
        assert parse_qs(urlsplit(body["next"]).query)["cursor"] == [cursor]


def test_cursor_pages_walk_every_job_in_due_order_with_ties(api, other_api) -> None:
    base = (db_now() + timedelta(hours=1)).replace(microsecond=0)
    # 25 jobs, many sharing one due time: ties must neither repeat nor vanish.
    dues = [base + timedelta(minutes=i % 3) for i in range(25)]
    ids = _schedule(api, dues)
    _schedule(other_api, dues[:5])
    seen, pages = _all_pages(api, {"limit": 10})
    assert pages == 3
    assert sorted(j["id"] for j in seen) == sorted(ids)
    keys = [(datetime.fromisoformat(j["due_at"]), j["id"]) for j in seen]
    assert keys == sorted(keys)


def test_filters(api) -> None:
    base = (db_now() + timedelta(hours=2)).replace(microsecond=0)
    early = _schedule(api, [base, base + timedelta(minutes=1)], metadata={"booking": "1"})
    late = _schedule(api, [base + timedelta(hours=1)], metadata={"booking": "2", "k": "v"})
    Job.objects.filter(id=early[0]).update(status=JobStatus.CANCELED)

    def ids(params):
        seen, _ = _all_pages(api, params)
        return {j["id"] for j in seen}

    assert ids({"status": "canceled"}) == {early[0]}
    assert ids({"status": "pending"}) == {early[1], *late}
    assert ids({"due_after": iso(base + timedelta(minutes=1))}) == {early[1], *late}
    assert ids({"due_before": iso(base + timedelta(minutes=1))}) == {early[0]}
    assert ids({"metadata": "booking=2"}) == set(late)
    assert ids({"metadata": ["booking=2", "k=v"]}) == set(late)
    assert ids({"metadata": ["booking=2", "k=w"]}) == set()
    assert ids({"metadata": "booking=1", "status": "pending"}) == {early[1]}


@pytest.mark.parametrize(
    "params",
    [
        {"status": "sleeping"},
        {"due_after": "2027-01-01T00:00:00"},
        {"due_before": "yesterday"},
        {"metadata": "novalue"},
        {"cursor": "!!!"},
        {"cursor": "bm90IGEgY3Vyc29y"},
        {"limit": "0"},
        {"limit": "5000"},
        {"page": "2"},
    ],
)
def test_bad_query_is_400(api, params) -> None:
    response = api.get(URL, params)
    assert response.status_code == 400
    assert error_of(response)["fields"]


@pytest.mark.parametrize("name", ["cursor", "due_after", "due_before", "limit", "status"])
def test_an_empty_query_value_is_a_400_naming_it(api, name) -> None:
    # The schema gives each a format or a minimum length: empty is not "absent".
    response = api.get(f"{URL}?{name}=")
    assert response.status_code == 400 and name in error_of(response)["fields"]


@pytest.mark.parametrize("value", ["booking", "=42", "k" * 65 + "=v", "k=" + "v" * 513])
def test_a_metadata_filter_must_be_key_equals_value(api, value) -> None:
    response = api.get(URL, {"metadata": value})
    assert response.status_code == 400 and "metadata" in error_of(response)["fields"]


def test_any_string_of_the_cursor_shape_is_a_cursor(api) -> None:
    response = api.get(URL, {"cursor": "0." + "0" * 32})
    assert response.status_code == 200
    assert error_of(api.get(URL, {"cursor": "MjAyNy0w"}))["fields"]["cursor"]
