"""A topic's children as PostgreSQL builds them (``fanout._children_insert``, one
INSERT ... SELECT) are the rows ``fanout._children_build`` makes in Python (the SQLite
path, through ``jobs_insert``): every column, for the same ids."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

import pytest
from django.db import connection, transaction

from polling.dispatch.base import ClaimedJob
from polling.writing import fanout
from polling.writing.writeback import Result
from scheduling import keys
from scheduling.models import Job, JobStatus, Team
from scheduling.sharding.buckets import shard_counts_record
from scheduling.sharding.clock import db_now, open_bucket
from scheduling.storage.jobinsert import COPY_COLUMNS, jobs_insert, new_job_ids

pytestmark = pytest.mark.django_db


def _parents(team: Team, other: Team, now) -> list:
    endpoints = [
        fanout._Endpoint("billing", "http://127.0.0.1:9/b", None, "topic:orders:billing"),
        fanout._Endpoint(
            "crm",
            "http://127.0.0.1:9/c?x=1&y=é",
            {"format": "payload", "timeout_seconds": 7, "headers": {"X-Crm": "sealed:abc"}},
            "crm-key",
        ),
        fanout._Endpoint("wh", "http://127.0.0.1:9/w", {"method": "PUT"}, "topic:orders:wh"),
    ]
    shapes = [
        # payload, metadata, expires, trace context, the parent's request
        ({"order": 42}, {}, None, None, None),
        (
            {"big": 12345678901234567890, "nested": [1, {"q": 'a"b\\c'}], "u": "ünï"},
            {"team": "t-1", "k": "v"},
            now + timedelta(hours=1),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            {"timeout_seconds": 3, "headers": {"X-Shape": "sealed:1"}, "callbacks": {"x": "y"}},
        ),
        ([1, 2, 3], {"order": "o-1"}, None, None, {"format": "payload", "children": {"a": "b"}}),
        ("just text", {}, now + timedelta(minutes=5), None, None),
    ]
    parents = []
    for number, (payload, metadata, expires, trace, request) in enumerate(shapes * 2):
        owner = team if number % 2 == 0 else other
        job = ClaimedJob(
            uuid4(), owner.pk, now, now, number % 4, 1, "topic", "orders", payload, metadata,
            expires,
        )  # fmt: skip
        job.trace_context, job.request = trace, request
        result = Result(job.id, JobStatus.FANNED_OUT, now, now, job.shard)
        parents.append((job, result, endpoints[: 1 + number % 3]))
    return parents


def _rows(ids: list[UUID]) -> dict[UUID, tuple]:
    names = [name for name, _ in COPY_COLUMNS]
    values = Job.objects.filter(id__in=ids).values_list(*names)
    return {row[0]: row for row in values}


@pytest.mark.postgres
def test_postgres_builds_the_same_children_rows_as_python(team, monkeypatch) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the one-statement fan-out is PostgreSQL's (DATABASE_URL=postgres://...)")
    other = Team.objects.create(slug="fanout-rows-other", name="Other")
    now = db_now()
    place = open_bucket(now)
    count = shard_counts_record([place])[place]
    parents = _parents(team, other, now)
    total = sum(len(eps) for _, _, eps in parents)
    drawn = [(str(v), keys.shard_of(str(v), count)) for v in new_job_ids(total)]
    monkeypatch.setattr(fanout, "_ids_on_shards", lambda n, c, s: list(drawn[:n]))
    ids = [UUID(text) for text, _ in drawn]

    with transaction.atomic():
        walk = fanout._children_walk(parents, count, ())
        written = fanout._children_insert(parents, walk, place, now)
        by_sql = _rows(ids)
        transaction.set_rollback(True)
    with transaction.atomic():
        walk_py = fanout._children_walk(parents, count, ())
        children = fanout._children_build(parents, walk_py, place, now)
        jobs_insert(children)
        by_python = _rows(ids)
        transaction.set_rollback(True)

    assert written == total == len(by_sql) == len(by_python)
    assert walk.shards == walk_py.shards == {shard for _, shard in drawn}
    # each parent names its children, the same on both walks
    assert [n[1] for n in walk.named] == [n[1] for n in walk_py.named]
    for child_id, row in by_python.items():
        assert by_sql[child_id] == row
    crm = [r for r in by_sql.values() if r[7].startswith("http://127.0.0.1:9/c")]
    assert crm and all(r[20] == "crm-key" and r[21]["timeout_seconds"] == 7 for r in crm)
