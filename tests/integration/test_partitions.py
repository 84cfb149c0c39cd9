"""Partitions of the jobs table (PostgreSQL) and retention (both databases)."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from polling.engine.poller import Poller
from polling.upkeep.storage import PARTITIONS_PER_ITERATION
from scheduling import keys
from scheduling.jobs.services import job_schedule_many
from scheduling.models import DeliveryAttempt, IdempotencyKey, Job, JobStatus, TaskRun
from scheduling.sharding.clock import db_now, open_bucket
from scheduling.storage.jobinsert import jobs_insert
from scheduling.storage.partitions import (
    DDL_LOCK_KEY,
    DEFAULT,
    PartitionBusy,
    bounds_of,
    name_of,
    partition_create,
    partitions_ensure,
    partitions_ensure_step,
    partitions_list,
    partitions_missing,
)
from scheduling.storage.retention import retention_prune
from tests.support.factories import in_flight_mark, job_spec

pytestmark = pytest.mark.django_db
postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="partitions exist on PostgreSQL only"
)


def _where(job_id: uuid.UUID) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM scheduling_job WHERE id = %s", [job_id]
        )
        return cursor.fetchone()[0]


def _old_job(team, bucket, status, *, updated_at=None, idempotency_key=None) -> Job:
    job = Job(
        id=uuid.uuid4(),
        team=team,
        due_at=bucket,
        bucket=bucket,
        shard=0,
        status=status,
        target_kind="handler",
        target="noop",
        idempotency_key=idempotency_key,
        created_at=bucket,
        updated_at=bucket,
        attempts=1,
    )
    jobs_insert([job])
    # auto_now would have stamped "now" on SQLite's bulk_create: set it afterwards.
    Job.objects.filter(id=job.id).update(updated_at=updated_at or bucket)
    DeliveryAttempt.objects.create(job_id=job.id, attempt=1, started_at=bucket, result="retry")
    return job


@postgres_only
def test_ensure_creates_days_ahead_and_moves_rows_out_of_default(team) -> None:
    now = db_now()
    partitions_ensure(now=now, days=1)
    far = [job for job, _ in job_schedule_many(team=team, specs=[job_spec(in_seconds=4 * 86400)])]
    assert _where(far[0].id) == DEFAULT
    assert partitions_ensure(now=now, days=1) == []  # nothing missing: a catalog read only
    created = partitions_ensure(now=now, days=5)
    assert sum(moved for _, moved in created) == 1
    start, end = bounds_of(far[0].bucket)
    assert _where(far[0].id) == f"scheduling_job_p{start:%Y%m%d}"
    ranges = [(p.start, p.end) for p in partitions_list() if not p.is_default]
    assert (start, end) in ranges and ranges == sorted(ranges)
    assert Job.objects.get(id=far[0].id).status == JobStatus.PENDING
    out = StringIO()
    call_command("partitions", "--list", stdout=out)
    assert f"scheduling_job_p{start:%Y%m%d}" in out.getvalue() and "DEFAULT" in out.getvalue()


@postgres_only
def test_prune_drops_old_partitions_after_moving_stragglers(team) -> None:
    now = db_now()
    old_start, old_end = bounds_of(now - timedelta(days=40))
    partition_create(old_start, old_end)
    bucket = old_start + timedelta(hours=3)
    delivered = _old_job(team, bucket, JobStatus.DELIVERED, idempotency_key="k-old")
    IdempotencyKey.objects.create(
        team=team, key="k-old", job_id=delivered.id, fingerprint="f", created_at=bucket
    )
    TaskRun.objects.create(job_id=delivered.id, task_path="x.y")
    canceled = _old_job(team, bucket, JobStatus.CANCELED)
    pending = _old_job(team, bucket, JobStatus.PENDING)
    in_flight = _old_job(team, bucket, JobStatus.PENDING)  # read by a poller that died
    in_flight_mark(in_flight)
    dead_recent = _old_job(team, bucket, JobStatus.DEAD, updated_at=now - timedelta(days=5))
    dead_old = _old_job(team, bucket, JobStatus.DEAD, updated_at=now - timedelta(days=200))
    before = Job.objects.count()

    report = retention_prune(now=now)

    name = f"scheduling_job_p{old_start:%Y%m%d}"
    assert report.dropped == [name] and report.moved == 3
    assert name not in {p.name for p in partitions_list()}
    assert not Job.objects.filter(id__in=[delivered.id, canceled.id, dead_old.id]).exists()
    assert Job.objects.count() == before - 3
    target = open_bucket(now)
    for job, status in (
        (pending, JobStatus.PENDING),
        (in_flight, JobStatus.PENDING),
        (dead_recent, JobStatus.DEAD),
    ):
        row = Job.objects.get(id=job.id)
        assert (row.status, row.bucket) == (status, target)
        assert row.shard == keys.shard_of(row.id, 64)
        assert DeliveryAttempt.objects.filter(job_id=job.id).count() == 1  # kept
    assert not DeliveryAttempt.objects.filter(job_id__in=[delivered.id, canceled.id]).exists()
    assert not TaskRun.objects.filter(job_id=delivered.id).exists()
    assert not IdempotencyKey.objects.filter(key="k-old").exists()
    assert retention_prune(now=now).dropped == []


@postgres_only
def test_prune_gives_way_to_another_pruner(team) -> None:
    """The prune lock is transaction-level (pgbouncer's transaction pooling keeps no
    session): while another transaction holds it, a prune drops nothing."""
    import psycopg

    from scheduling.storage.retention import PRUNE_LOCK_KEY
    from tests.support.procs import test_database_url

    now = db_now()
    old_start, old_end = bounds_of(now - timedelta(days=40))
    partition_create(old_start, old_end)
    with psycopg.connect(test_database_url()) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", [PRUNE_LOCK_KEY])
        report = retention_prune(now=now)
        assert report.busy and report.dropped == []
    assert retention_prune(now=now).dropped == [f"scheduling_job_p{old_start:%Y%m%d}"]


def test_plain_table_retention_deletes_old_terminal_rows_only(team) -> None:
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL drops partitions (see above)")
    now = db_now()
    old = open_bucket(now - timedelta(days=40))
    gone = [_old_job(team, old, s) for s in (JobStatus.DELIVERED, JobStatus.CANCELED)]
    dead_old = _old_job(team, old, JobStatus.DEAD, updated_at=now - timedelta(days=200))
    kept = [
        _old_job(team, old, JobStatus.PENDING),
        _old_job(team, old, JobStatus.DEAD, updated_at=now - timedelta(days=5)),
        _old_job(team, open_bucket(now - timedelta(days=2)), JobStatus.DELIVERED),
    ]
    report = retention_prune(now=now)
    assert report.deleted == 3 and report.dropped == []
    assert not Job.objects.filter(id__in=[j.id for j in [*gone, dead_old]]).exists()
    assert Job.objects.filter(id__in=[j.id for j in kept]).count() == 3
    assert DeliveryAttempt.objects.count() == 3
    out = StringIO()
    call_command("partitions", "--list", stdout=out)
    assert "SQLite keeps the jobs table as a plain table" in out.getvalue()


def _due_at_once(team, jobs: int) -> tuple[datetime, list[Job], Poller]:
    """``jobs`` due one second after a future base, and a poller holding every shard
    whose clock stands five seconds after it (lease renewal out of the way): its next
    ``shard_reads.read(base, shard, ...)`` reads one shard's share of them."""
    from tests.support.pollers import future_base, poller_build

    base = future_base()
    specs = [job_spec(due_at=base + timedelta(seconds=1)) for _ in range(jobs)]
    scheduled = [job for job, _ in job_schedule_many(team=team, specs=specs, now=base)]
    poller = poller_build(batch_size=2000)
    poller.iterate(now=base - timedelta(seconds=5))  # leases, partitions; nothing due yet
    poller._anchor(base + timedelta(seconds=5))
    poller.ownership.next_renewal = base + timedelta(hours=1)  # lease renewal is time-gated
    return base, scheduled, poller


@pytest.mark.parametrize("jobs", [20, 1500])
def test_a_batch_costs_the_same_statements_whatever_its_size(team, jobs) -> None:
    """The read (window lock, SELECT, batch row) and the write-back (one UPDATE, the
    batch row deleted): the same statements whatever the batch's size, and no
    attempt row for a delivery."""
    from django.test.utils import CaptureQueriesContext

    base, scheduled, poller = _due_at_once(team, jobs)
    shard = scheduled[0].shard
    in_shard = sum(job.shard == shard for job in scheduled)
    with CaptureQueriesContext(connection) as queries:
        claimed = poller.shard_reads.read(base, shard, 2000)
        poller.pump.settle()
    assert claimed == in_shard
    work = [q["sql"] for q in queries if "SAVEPOINT" not in q["sql"]]
    if connection.vendor == "postgresql":  # the UPDATE between the planner's SET LOCALs
        expected = ["SELECT pg_advisory_xact_lock", "SELECT", "INSERT"]
        expected += ["SET LOCAL", "UPDATE", "SET LOCAL", "DELETE"]
    else:  # SQLite: serialised writers need no window lock; the write is a VALUES join
        expected = ["SELECT", "INSERT", "WITH", "DELETE"]
    assert len(work) == len(expected), work
    assert all(sql.lstrip().startswith(word) for sql, word in zip(work, expected, strict=True))
    assert "scheduling_inflightbatch" in work[-1] and not DeliveryAttempt.objects.exists()
    assert Job.objects.filter(shard=shard, status="delivered").count() == in_shard


@postgres_only
def test_the_write_back_probes_the_primary_key_in_a_partition_never_analyzed(
    team, monkeypatch
) -> None:
    """A burst's partition has no statistics when its jobs are written back: the
    delivered rows' UPDATE still goes to its rows by primary key, never through the
    bucket's pending index or a scan of the partition (which it did: 100,000 index
    entries walked for each 1,000 jobs)."""
    from polling.writing import writeback

    base, scheduled, poller = _due_at_once(team, 3000)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.last_analyze, s.last_autoanalyze FROM pg_stat_user_tables s"
            " WHERE s.relid = (SELECT tableoid FROM scheduling_job WHERE id = %s)",
            [scheduled[0].id],
        )
        assert cursor.fetchone() in (None, (None, None))  # never analyzed: the case at stake
    plans: list[str] = []
    real = writeback.fetch_all

    def explained(sql: str, params):  # type: ignore[no-untyped-def]
        if sql.lstrip().startswith("UPDATE scheduling_job"):
            plans.append("\n".join(row[0] for row in real("EXPLAIN " + sql, params)))
        return real(sql, params)

    monkeypatch.setattr(writeback, "fetch_all", explained)
    shard = scheduled[0].shard
    assert poller.shard_reads.read(base, shard, 2000)
    poller.pump.settle()
    assert len(plans) == 1
    assert "_pkey" in plans[0], plans[0]
    assert "bucket_shard_due" not in plans[0] and "Seq Scan on scheduling_job" not in plans[0]
    assert Job.objects.filter(shard=shard, status="delivered").count() == sum(
        job.shard == shard for job in scheduled
    )


def _drop_partitions_not_in(kept: set[str]) -> None:
    """Detach and drop the dated partitions a test created, one transaction each."""
    for part in partitions_list():
        if part.is_default or part.name in kept:
            continue
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE scheduling_job DETACH PARTITION {part.name}")
            cursor.execute(f"DROP TABLE {part.name}")


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_poller_on_a_fresh_database_keeps_its_leases_while_it_creates_the_horizon(
    settings,
) -> None:
    """~400 missing partitions (the default horizon) are created a few per iteration,
    nearest first: the leases keep their epochs throughout (no iteration held the
    loop past the lease), and the whole horizon exists in the end. How long an
    iteration takes is bench/ material, not a test's: it moves with the machine."""
    from tests.support.pollers import RecordingSink

    settings.SENDLATER_LEASE_SECONDS = 3
    settings.SENDLATER_PARTITION_AHEAD_DAYS = settings.SENDLATER_MAX_HORIZON_DAYS + 2
    kept = {p.name for p in partitions_list()}
    # A stretch of time no other test has partitions in: the database is fresh there.
    skew = timedelta(days=365 * 30)

    def clock():
        return db_now() + skew

    poller = Poller(
        name="fresh", sink=RecordingSink(), batch_size=100, poll_interval=0.05,
        sweep_every=3600, host="test", pid=1, clock=clock,
    )  # fmt: skip
    try:
        poller.start()
        horizon = settings.SENDLATER_PARTITION_AHEAD_DAYS
        assert len(partitions_missing(now=clock(), days=horizon)) > 400
        iterations, epochs = 0, None
        for _ in range(400):
            created = len(partitions_missing(now=clock(), days=horizon))
            assert poller.step() is False
            iterations += 1
            created -= len(partitions_missing(now=clock(), days=horizon))
            assert created <= PARTITIONS_PER_ITERATION
            epochs = epochs or dict(poller.leases)
            assert poller.leases == epochs and len(epochs) == settings.SENDLATER_DEFAULT_SHARDS
            if not partitions_missing(now=clock(), days=horizon):
                break
            time.sleep(poller.poll_interval)
        assert not partitions_missing(now=clock(), days=horizon)
        assert iterations > 400 // PARTITIONS_PER_ITERATION
    finally:
        _drop_partitions_not_in(kept)


@postgres_only
def test_missing_partitions_come_nearest_first() -> None:
    now = db_now() + timedelta(days=365 * 30)
    current, _ = bounds_of(now)
    missing = partitions_missing(now=now, days=3)
    day = timedelta(days=1)
    assert missing == [current, current + day, current - day, current + 2 * day, current + 3 * day]


@postgres_only
@pytest.mark.parametrize("held", ["default partition", "ddl advisory lock"])
def test_partition_ddl_gives_way_to_a_held_lock_and_is_retried(held) -> None:
    """Queued behind a reader of the DEFAULT partition (or another creator), the DDL
    waits at most its lock_timeout, then rolls back and says so; later it succeeds."""
    import psycopg

    from tests.support.procs import test_database_url

    now = db_now() + timedelta(days=365 * 30)
    start, end = bounds_of(now)
    with psycopg.connect(test_database_url()) as other:
        if held == "default partition":
            other.execute(f"LOCK TABLE {DEFAULT} IN ACCESS SHARE MODE")
        else:
            other.execute("SELECT pg_advisory_xact_lock(%s)", [DDL_LOCK_KEY])
        t0 = time.monotonic()
        with pytest.raises(PartitionBusy):
            partition_create(start, end, lock_timeout_ms=200)
        assert time.monotonic() - t0 < 2
        report = partitions_ensure_step(now=now, days=1)
        assert report.busy and report.remaining == 3 and report.created == []
        other.rollback()
    report = partitions_ensure_step(now=now, days=1, max_count=2)
    assert report.created and not report.busy and report.remaining == 1
    assert [name for name, _ in report.created] == [name_of(start), name_of(end)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('lock_timeout')")
        assert cursor.fetchone()[0] == "0"  # the caller's setting is left as it was


@postgres_only
def test_callbacks_and_children_are_named_on_their_parents_by_primary_key(
    team, monkeypatch
) -> None:
    """The UPDATE that names callback jobs and topic children on their parents (and
    keeps responses) goes to its rows by primary key in a partition never analyzed.
    Joined to VALUES it was planned as a nested loop scanning the whole partition
    once per row: 12 s for one topic group's parents, and the poller's leases lapsed."""
    from types import SimpleNamespace

    from polling.common.sql import fetch_all
    from polling.writing import callbacks

    _, scheduled, _ = _due_at_once(team, 3000)
    named = scheduled[:300]
    plans: list[str] = []
    real = callbacks.rowcount

    def explained(sql: str, params):  # type: ignore[no-untyped-def]
        if "UPDATE scheduling_job" in sql:
            plans.append("\n".join(row[0] for row in fetch_all("EXPLAIN " + sql, params)))
        return real(sql, params)

    monkeypatch.setattr(callbacks, "rowcount", explained)
    rows = [
        (
            SimpleNamespace(job_id=job.id, bucket=job.bucket),
            {"children": {"e0": str(uuid.uuid4())}, "n": i},
            None if i % 2 else {"status": 500, "body": "no"},
        )
        for i, job in enumerate(named)
    ]
    with transaction.atomic():
        callbacks.extras_write(rows)  # type: ignore[arg-type]
    assert len(plans) == 1
    assert "_pkey" in plans[0], plans[0]
    assert "Seq Scan on scheduling_job" not in plans[0] and "Values Scan" not in plans[0]
    got = {j.id: (j.request, j.response) for j in Job.objects.filter(id__in=[j.id for j in named])}
    for i, job in enumerate(named):
        request, response = got[job.id]
        assert request["n"] == i and set(request["children"]) == {"e0"}
        assert response == (None if i % 2 else {"status": 500, "body": "no"})
    others = Job.objects.exclude(id__in=[j.id for j in named])
    assert not others.filter(request__isnull=False).exists()
