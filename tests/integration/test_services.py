"""Scheduling services on the configured database (SQLite or PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling import keys
from scheduling.errors import (
    IdempotencyConflict,
    InvalidCutover,
    InvalidDueTime,
    InvalidTarget,
    JobNotFound,
    JobNotPending,
)
from scheduling.jobs.services import (
    cutover_earliest,
    cutover_schedule,
    job_cancel,
    job_reschedule,
    job_schedule,
    job_schedule_many,
)
from scheduling.jobs.specs import JobSpec
from scheduling.models import Bucket, Job, JobStatus, ShardCountSchedule
from scheduling.sharding.buckets import shard_count_of
from scheduling.sharding.clock import db_now, open_bucket
from tests.support.factories import in_flight_mark, job_spec

pytestmark = pytest.mark.django_db

W = 60


def schedule(team, **kw):
    kw.setdefault("due_at", db_now() + timedelta(minutes=5))
    kw.setdefault("target_kind", "handler")
    kw.setdefault("target", "noop")
    kw.setdefault("payload", {"x": 1})
    return job_schedule(team=team, **kw)


def test_job_lands_in_its_bucket_with_the_recorded_shard(team) -> None:
    due = db_now() + timedelta(minutes=5)
    job, created = schedule(team, due_at=due)
    assert created
    job.refresh_from_db()
    assert job.due_at == due
    assert job.bucket == keys.bucket_of(due, W)
    count = Bucket.objects.get(start=job.bucket).shard_count
    assert count == 64
    assert job.shard == keys.shard_of(job.id, count)
    assert job.status == JobStatus.PENDING


def test_job_due_ten_minutes_ago_goes_into_the_open_bucket(team) -> None:
    now = db_now()
    due = now - timedelta(minutes=10)
    job, _ = schedule(team, due_at=due, now=now)
    job.refresh_from_db()
    assert job.due_at == due  # the time the client asked for is kept
    assert job.bucket == open_bucket(now)
    assert job.shard == keys.shard_of(job.id, shard_count_of(open_bucket(now)))


def test_job_a_year_ahead_records_that_buckets_shard_count(team) -> None:
    due = db_now() + timedelta(days=365)
    schedule(team, due_at=due)
    assert Bucket.objects.get(start=keys.bucket_of(due, W)).shard_count == 64


def test_cutover_leaves_recorded_buckets_at_their_old_count(team) -> None:
    now = db_now()
    earliest = cutover_earliest(now)
    later = earliest + timedelta(days=30)
    far_job, _ = schedule(team, due_at=later + timedelta(seconds=5), now=now)
    recorded = {b.start: b.shard_count for b in Bucket.objects.all()}

    cutover_schedule(shard_count=128, effective_from=earliest, reason="grow", now=now)

    assert {b.start: b.shard_count for b in Bucket.objects.all()} == recorded
    # A later write into the already-recorded bucket still uses 64 shards...
    again, _ = schedule(team, due_at=later + timedelta(seconds=7), now=now)
    assert again.bucket == far_job.bucket
    assert again.shard == keys.shard_of(again.id, 64)
    # ...while a new bucket after the cutover records 128.
    fresh, _ = schedule(team, due_at=later + timedelta(days=1), now=now)
    assert Bucket.objects.get(start=fresh.bucket).shard_count == 128
    assert fresh.shard == keys.shard_of(fresh.id, 128)
    # And a bucket before the cutover still records 64.
    before, _ = schedule(team, due_at=earliest - timedelta(seconds=30), now=now)
    assert Bucket.objects.get(start=before.bucket).shard_count == 64


def test_cutover_validation(team) -> None:
    now = db_now()
    earliest = cutover_earliest(now)
    assert earliest >= open_bucket(now) + timedelta(seconds=W + 300)
    with pytest.raises(InvalidCutover, match="at or after"):
        cutover_schedule(shard_count=128, effective_from=open_bucket(now), now=now)
    with pytest.raises(InvalidCutover, match="bucket boundary"):
        cutover_schedule(shard_count=128, effective_from=earliest + timedelta(seconds=1), now=now)
    with pytest.raises(InvalidCutover, match="UTC offset"):
        cutover_schedule(shard_count=128, effective_from=earliest.replace(tzinfo=None), now=now)
    for bad in (0, -3, 4097):
        with pytest.raises(InvalidCutover, match="between 1 and 4096") as info:
            cutover_schedule(shard_count=bad, effective_from=earliest, now=now)
        assert info.value.field == "shard_count"
    cutover_schedule(shard_count=96, effective_from=earliest, now=now)
    with pytest.raises(InvalidCutover, match="already starts"):
        cutover_schedule(shard_count=80, effective_from=earliest, now=now)
    assert ShardCountSchedule.objects.filter(effective_from=earliest).get().shard_count == 96


def test_due_time_errors(team) -> None:
    with pytest.raises(InvalidDueTime, match="UTC offset"):
        schedule(team, due_at=datetime(2030, 1, 1))
    with pytest.raises(InvalidDueTime, match="400 days"):
        schedule(team, due_at=db_now() + timedelta(days=401))
    with pytest.raises(InvalidTarget, match="unknown handler"):
        schedule(team, target="nope")
    with pytest.raises(InvalidTarget, match="http"):
        schedule(team, target_kind="webhook", target="ftp://example.com/x")
    assert not Job.objects.exists()


def test_idempotency_replay_and_conflict(team, other_team) -> None:
    due = db_now() + timedelta(hours=1)
    first, created = schedule(team, due_at=due, idempotency_key="k1")
    again, created_again = schedule(team, due_at=due, idempotency_key="k1")
    assert created and not created_again and again.id == first.id
    with pytest.raises(IdempotencyConflict):
        schedule(team, due_at=due, idempotency_key="k1", payload={"x": 2})
    # Keys are per team.
    theirs, created_theirs = schedule(other_team, due_at=due, idempotency_key="k1")
    assert created_theirs and theirs.id != first.id
    assert Job.objects.count() == 2


def test_bulk_of_a_thousand_is_a_handful_of_statements(team) -> None:
    base = keys.bucket_of(db_now() + timedelta(minutes=2), W)
    specs = [job_spec(due_at=base + timedelta(seconds=i % 600)) for i in range(1000)]
    with CaptureQueriesContext(connection) as queries:
        results = job_schedule_many(team=team, specs=specs)
    assert len(results) == 1000 and all(created for _, created in results)
    assert Job.objects.count() == 1000
    assert Bucket.objects.count() == 10
    # db clock, bucket read, schedule read, bucket insert, bucket re-read, inserts
    # (SQLite splits a 1,000-row INSERT by its variable limit), transaction control.
    assert len(queries) <= 12, [q["sql"][:80] for q in queries]
    for job in Job.objects.all()[:50]:
        assert job.shard == keys.shard_of(job.id, 64)


def test_bulk_rows_stored_are_the_jobs_returned(team) -> None:
    """Rows are streamed to the database as they are built: what is stored is what
    the call returns, field for field, metadata labels shared or not."""
    base = db_now() + timedelta(minutes=3)
    specs = [
        job_spec(due_at=base + timedelta(seconds=i), payload={"i": i}, metadata=meta)
        for i, meta in enumerate([{"a": "1"}, {"a": "1"}, {}, {"b": "2", "a": "1"}] * 25)
    ]
    results = job_schedule_many(team=team, specs=specs)
    stored = {job.id: job for job in Job.objects.all()}
    assert len(stored) == 100
    for (job, created), spec in zip(results, specs, strict=True):
        row = stored[job.id]
        assert created and row.team_id == team.pk and row.status == JobStatus.PENDING
        assert (row.due_at, row.bucket, row.shard) == (job.due_at, job.bucket, job.shard)
        assert (row.payload, row.metadata) == (spec.payload, spec.metadata)
        assert row.shard == keys.shard_of(row.id, 64) and row.id.version == 4
    # Every spec a replay: nothing is written, no empty COPY either.
    keyed = [job_spec(in_seconds=60, idempotency_key=f"k{i}") for i in range(3)]
    job_schedule_many(team=team, specs=keyed)
    with CaptureQueriesContext(connection) as queries:
        again = job_schedule_many(team=team, specs=keyed)
    assert not any(created for _, created in again)
    assert not any("COPY" in q["sql"] or "INSERT" in q["sql"] for q in queries)


def test_a_job_that_fails_to_build_mid_batch_writes_nothing(team, monkeypatch) -> None:
    from scheduling.jobs import services

    real, calls = services.keys.shard_of, []

    def shard_of(job_id, count):  # the 5th row fails after 4 were sent
        calls.append(job_id)
        if len(calls) == 5:
            raise RuntimeError("boom")
        return real(job_id, count)

    monkeypatch.setattr(services.keys, "shard_of", shard_of)
    with pytest.raises(RuntimeError):
        job_schedule_many(team=team, specs=[job_spec(in_seconds=60) for _ in range(8)])
    assert not Job.objects.exists()


def test_bulk_is_all_or_nothing_and_names_the_bad_item(team) -> None:
    specs = [job_spec(in_seconds=60) for _ in range(5)]
    specs[3] = job_spec(due_at=datetime(2030, 1, 1))
    with pytest.raises(InvalidDueTime) as info:
        job_schedule_many(team=team, specs=specs)
    assert info.value.field == "[3].due_at"
    assert not Job.objects.exists()


def test_bulk_idempotency_within_and_across_batches(team) -> None:
    a = job_spec(in_seconds=120, idempotency_key="a")
    b = job_spec(in_seconds=180, idempotency_key="b")
    results = job_schedule_many(team=team, specs=[a, b, a])
    assert [created for _, created in results] == [True, True, False]
    assert results[0][0].id == results[2][0].id
    replay = job_schedule_many(team=team, specs=[b, job_spec(in_seconds=60)])
    assert replay[0][0].id == results[1][0].id and not replay[0][1]
    assert Job.objects.count() == 3
    with pytest.raises(IdempotencyConflict):
        job_schedule_many(team=team, specs=[job_spec(in_seconds=60, idempotency_key="a")])


def test_cancel(team, other_team) -> None:
    job, _ = schedule(team)
    canceled = job_cancel(team=team, job_id=job.id)
    assert canceled.status == JobStatus.CANCELED
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELED
    with pytest.raises(JobNotPending):
        job_cancel(team=team, job_id=job.id)
    other, _ = schedule(team)
    with pytest.raises(JobNotFound):
        job_cancel(team=other_team, job_id=other.id)
    in_flight_mark(other)
    with pytest.raises(JobNotPending, match="being delivered"):
        job_cancel(team=team, job_id=other.id)
    assert Job.objects.get(id=other.id).status == JobStatus.PENDING


def test_reschedule_moves_bucket_and_shard(team) -> None:
    now = db_now()
    earliest = cutover_earliest(now)
    cutover_schedule(shard_count=7, effective_from=earliest + timedelta(days=1), now=now)
    job, _ = schedule(team, due_at=now + timedelta(minutes=3), now=now)
    target = earliest + timedelta(days=2, seconds=13)
    moved = job_reschedule(team=team, job_id=job.id, due_at=target, payload={"y": 2}, now=now)
    moved.refresh_from_db()
    assert moved.due_at == target
    assert moved.bucket == keys.bucket_of(target, W)
    assert moved.shard == keys.shard_of(job.id, 7)
    assert moved.payload == {"y": 2}
    back = job_reschedule(team=team, job_id=job.id, due_at=now - timedelta(hours=1), now=now)
    assert back.bucket == open_bucket(now) and back.payload == {"y": 2}
    job_cancel(team=team, job_id=job.id)
    with pytest.raises(JobNotPending):
        job_reschedule(team=team, job_id=job.id, due_at=target)


def test_window_spreads_due_time_and_expiry_is_recorded(team) -> None:
    due = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
    if due < db_now():  # keep the example in the future whatever the date
        due = keys.bucket_of(db_now() + timedelta(days=1), W)
    specs = [
        job_spec(due_at=due, window_seconds=600, expires_after_seconds=900) for _ in range(200)
    ]
    jobs = [j for j, _ in job_schedule_many(team=team, specs=specs)]
    assert all(due <= j.due_at <= due + timedelta(seconds=600) for j in jobs)
    assert len({j.bucket for j in jobs}) >= 8  # spread over the ten buckets
    assert all(j.expires_at == due + timedelta(seconds=900) for j in jobs)


def test_callback_urls_are_checked_at_scheduling_time(team, settings) -> None:
    with pytest.raises(InvalidTarget, match="loopback"):
        schedule(team, target_kind="webhook", target="http://127.0.0.1:9/hook")
    with pytest.raises(InvalidTarget, match="link-local"):
        schedule(team, target_kind="webhook", target="http://169.254.169.254/")
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    job, created = schedule(team, target_kind="webhook", target="http://127.0.0.1:9/hook")
    assert created and job.target == "http://127.0.0.1:9/hook"
    public, _ = schedule(team, target_kind="webhook", target="https://hooks.example.com/x")
    assert public.target_kind == "webhook"


def test_one_job_is_stored_as_a_batch_stores_it(team) -> None:
    """A single job (one INSERT on PostgreSQL) and the same job in a batch (COPY) make
    rows that read back alike: JSON, unicode, NULLs, the window and expiry."""
    spec = {
        "due_at": db_now() + timedelta(minutes=5),
        "target_kind": "handler",
        "target": "noop",
        "payload": {"s": "é\u2028\"'\\", "n": [1, 2.5, None, True], "deep": {"a": {}}},
        "metadata": {"booking": "42", "ключ": "значение"},
        "window_seconds": 30,
        "expires_after_seconds": 600,
    }
    one, created = job_schedule(team=team, **spec)
    assert created
    (many, _), (other, _) = job_schedule_many(team=team, specs=[JobSpec(**spec)] * 2)
    fields = [f.attname for f in Job._meta.concrete_fields if f.attname not in {"id", "shard"}]
    fields.remove("due_at")  # spread inside the window by the id
    fields.remove("bucket")
    stored = Job.objects.get(id=one.id)
    batched = Job.objects.get(id=many.id)
    differs = {"created_at", "updated_at"}
    for name in fields:
        if name not in differs:
            assert getattr(stored, name) == getattr(batched, name), name
    assert stored.due_at == one.due_at and stored.bucket == one.bucket
    assert stored.shard == one.shard and other.id != many.id
