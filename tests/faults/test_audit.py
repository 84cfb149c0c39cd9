"""The fault suite's own audit trail: does it see every fenced write-back?

Not a scenario (no cluster): the write-back statements run in this process
against the partitioned jobs table with the audit triggers installed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest

from polling.ownership import leases, registration
from polling.reading import take
from polling.writing.writeback import Result, write_back
from scheduling import keys
from scheduling.models import Job, JobStatus
from scheduling.sharding.clock import db_now
from scheduling.storage.jobinsert import jobs_insert
from scheduling.storage.partitions import bounds_of, name_of, partitions_ensure
from tests.faults.audit import audit_install, audit_uninstall
from tests.faults.cluster import sql
from tests.faults.invariants import Report, _fencing

SHARD = 5


@pytest.fixture
def audited(transactional_db) -> Iterator[None]:  # type: ignore[no-untyped-def]
    audit_install()
    yield
    audit_uninstall()


def _pending(team, bucket, *, now) -> Job:
    """A job due now, written into ``bucket`` of shard ``SHARD`` (as a late write is)."""
    job = Job(
        id=uuid.uuid4(), team=team, due_at=now - timedelta(seconds=1), bucket=bucket,
        shard=SHARD, status=JobStatus.PENDING, target_kind="handler", target="noop",
        created_at=now, updated_at=now,
    )  # fmt: skip
    jobs_insert([job])
    return job


def test_a_retry_moved_to_another_partition_is_audited_and_checked_by_i3(audited, team) -> None:
    """A retry into the next day's partition is a DELETE + INSERT at the partition
    level (no AFTER UPDATE fires): the audit still records it, with its writer, and
    I3 matches it to the epoch of the read, flagging it when a newer epoch began
    before it."""
    now = db_now()
    partitions_ensure(now=now, days=2)
    registration.shard_rows_ensure(shard_count=64)
    [(shard, epoch)] = leases.lease_acquire(
        owner="p0", shards={SHARD}, now=now, until=now + timedelta(minutes=5)
    ).items()
    _start, end = bounds_of(now)
    last_today, tomorrow = end - timedelta(seconds=60), end + timedelta(seconds=60)
    moved = _pending(team, last_today, now=now)
    stayed = _pending(team, last_today, now=now)
    sql("SET application_name = 'faults-p0'")  # the writer, as the cluster names pollers
    try:
        read = take.batch_take(
            owner="p0", epoch=epoch, bucket=last_today, shard=SHARD, now=now, limit=10
        )
        assert {j.id for j in read} == {moved.id, stayed.id}
        results = [
            Result(moved.id, "pending", tomorrow, tomorrow, keys.shard_of(moved.id, 64), "boom",
                   from_bucket=last_today, epoch=epoch, attempt=1),
            Result(stayed.id, "delivered", moved.due_at, last_today, SHARD, epoch=epoch,
                   attempt=1),
        ]  # fmt: skip
        assert write_back(owner="p0", results=results, now=now) == {moved.id, stayed.id}
    finally:
        sql("RESET application_name")
    where = dict(sql("SELECT id, tableoid::regclass::text FROM scheduling_job"))
    assert where[moved.id] == name_of(end) and where[stayed.id] == name_of(_start)

    rows = sql("SELECT job_id, shard, writer, new_status, moved FROM faults_job_write")
    assert sorted(rows, key=lambda r: r[4]) == [
        (stayed.id, SHARD, "p0", "delivered", False),
        (moved.id, SHARD, "p0", "pending", True),
    ]
    assert sql("SELECT count(*) FROM faults_job_moved_out")[0][0] == 0  # paired, cleared
    assert sql("SELECT count(*) FROM faults_read WHERE epoch = %s", [epoch])[0][0] == 2

    report = Report("audit")
    _fencing(report)
    assert report.violations == []
    # Had a newer epoch of the shard begun before those writes, I3 sees both.
    sql(
        "INSERT INTO faults_lease (shard, epoch, owner, acquired_at) VALUES (%s, %s, 'p1', %s)",
        [shard, epoch + 1, now - timedelta(seconds=1)],
    )
    _fencing(report)
    assert report.violations == [
        "I3: 2 writes applied under a superseded epoch"
        " (1 of them retries moved to another partition, 0 never read)"
    ]
