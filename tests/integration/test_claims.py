"""The fenced statements of polling.reading.take, on SQLite and PostgreSQL."""

from __future__ import annotations

import collections
import functools
from datetime import timedelta

import pytest
from django.db import connection

from polling.models import ShardCheckpoint, ShardLease
from polling.ownership import leases
from polling.ownership.registration import shard_rows_ensure
from polling.reading import checkpoints, take
from polling.writing import writeback
from polling.writing.writeback import Result
from scheduling import keys
from scheduling.jobs.inflight import job_in_flight
from scheduling.jobs.services import job_schedule_many
from scheduling.models import InFlightBatch, Job, JobStatus
from tests.support.factories import job_spec
from tests.support.pollers import future_base

pytestmark = pytest.mark.django_db
L = timedelta(seconds=15)


@pytest.fixture
def base():
    shard_rows_ensure(shard_count=64)
    return future_base()


def schedule(team, base, n=20, offset=timedelta(seconds=5)):
    specs = [job_spec(due_at=base + offset + timedelta(milliseconds=i)) for i in range(n)]
    return [job for job, _ in job_schedule_many(team=team, specs=specs, now=base)]


def claimed_by_a(team, base, *, n):
    """Schedule ``n`` jobs; "a" leases the first one's shard and reads its due rows."""
    shard = schedule(team, base, n=n)[0].shard
    bucket = keys.bucket_of(base, 60)
    now = base + timedelta(seconds=10)
    epoch = leases.lease_acquire(owner="a", shards=[shard], now=base, until=base + L)[shard]
    got = take.batch_take(owner="a", epoch=epoch, bucket=bucket, shard=shard, now=now, limit=50)
    return got, shard, bucket, now


def test_acquire_increments_epoch_and_only_free_or_expired(base) -> None:
    got = leases.lease_acquire(owner="a", shards=[0, 1], now=base, until=base + L)
    assert got == {0: 1, 1: 1}
    assert leases.lease_acquire(owner="b", shards=[0, 1, 2], now=base, until=base + L) == {2: 1}
    later = base + L
    assert leases.lease_acquire(owner="b", shards=[0], now=later, until=later + L) == {0: 2}
    assert ShardLease.objects.get(shard=0).owner == "b"


def test_renew_keeps_only_unexpired_and_release_is_owner_only(base) -> None:
    leases.lease_acquire(owner="a", shards=[0, 1], now=base, until=base + L)
    assert leases.lease_renew(owner="a", now=base + timedelta(seconds=5), until=base + 2 * L) == {
        0: 1,
        1: 1,
    }
    assert leases.lease_renew(owner="a", now=base + 3 * L, until=base + 4 * L) == {}
    leases.lease_acquire(owner="b", shards=[0], now=base + 3 * L, until=base + 4 * L)
    assert leases.lease_release(owner="a", shards=[0, 1]) == [1]
    assert ShardLease.objects.get(shard=0).owner == "b"
    assert not leases.lease_release_fenced(shard=0, owner="b", epoch=1)
    assert leases.lease_release_fenced(shard=0, owner="b", epoch=2)


def test_read_is_fenced_ordered_due_only_and_changes_no_row(team, base) -> None:
    jobs = schedule(team, base, n=300)
    shard = collections.Counter(j.shard for j in jobs).most_common(1)[0][0]
    in_shard = sorted((j for j in jobs if j.shard == shard), key=lambda j: j.due_at)
    assert len(in_shard) >= 3
    epoch = leases.lease_acquire(owner="a", shards=[shard], now=base, until=base + L)[shard]
    bucket = keys.bucket_of(base, 60)
    take_due = functools.partial(take.batch_take, bucket=bucket, shard=shard)
    # Not due yet: nothing, and no batch recorded.
    assert not take_due(owner="a", epoch=epoch, now=base, limit=9)
    assert not InFlightBatch.objects.exists()
    now = base + timedelta(seconds=10)
    # Wrong epoch, wrong owner, expired lease: fenced out, nothing recorded.
    for owner, at_epoch, at in (("a", epoch + 1, now), ("b", epoch, now), ("a", epoch, base + L)):
        with pytest.raises(leases.LeaseLost):
            take_due(owner=owner, epoch=at_epoch, now=at, limit=9)
    assert not InFlightBatch.objects.exists()
    got = take_due(owner="a", epoch=epoch, now=now, limit=1)
    assert [g.id for g in got] == [in_shard[0].id]
    assert got[0].attempt == 1 and got[0].payload == {"n": 1} and got[0].target == "noop"
    assert got[0].epoch == epoch
    row = Job.objects.get(id=got[0].id)
    assert (row.status, row.attempts) == (JobStatus.PENDING, 0)  # the lease is the lock
    (batch,) = InFlightBatch.objects.all()
    assert (batch.id, batch.shard, batch.epoch, batch.owner) == (got[0].batch, shard, epoch, "a")
    assert job_in_flight(row) and not job_in_flight(Job.objects.get(id=in_shard[1].id))
    # The next read from the cursor passes over what is in flight.
    more = take_due(
        owner="a", epoch=epoch, now=now, limit=2, after=got[0].due_at, skip={row.id: 0}, fetch=3
    )
    assert [g.id for g in more] == [j.id for j in in_shard[1:3]]


def test_write_back_is_fenced_by_lease_epoch(team, base) -> None:
    got, shard, _, _ = claimed_by_a(team, base, n=10)
    # b takes the shard over after a's lease expired: a's write-back changes nothing.
    later = base + L + timedelta(seconds=1)
    leases.lease_acquire(owner="b", shards=[shard], now=later, until=later + L)
    results = [Result(j.id, "delivered", j.due_at, j.bucket, j.shard, epoch=j.epoch) for j in got]
    assert writeback.write_back(owner="a", results=results, now=later) == set()
    assert set(Job.objects.filter(shard=shard).values_list("status", flat=True)) == {"pending"}
    assert leases.inflight_clear_stale(owner="b", shards=[shard], now=later) == 1
    assert not InFlightBatch.objects.exists()


def test_write_back_outcomes_in_two_statements(team, base, django_assert_max_num_queries) -> None:
    got, _, bucket, now = claimed_by_a(team, base, n=40)
    assert got
    new_bucket = bucket + timedelta(minutes=5)
    statuses = ["delivered", "pending", "dead", "expired"]
    started = now - timedelta(seconds=1)
    results = [
        Result(
            j.id,
            statuses[i % 4],
            j.due_at if i % 4 != 1 else new_bucket,
            j.bucket if i % 4 != 1 else new_bucket,
            j.shard if i % 4 != 1 else keys.shard_of(j.id, 64),
            "e" if i % 4 else "",
            from_bucket=j.bucket,
            epoch=j.epoch,
            started_at=started,
            duration_ms=i,
            status_code=200 if i % 4 == 0 else None,
        )
        for i, j in enumerate(got)
    ]
    # Delivered rows by id list (PostgreSQL), every other outcome in one VALUES join; on
    # PostgreSQL between two SET LOCALs that keep both on the primary key.
    with django_assert_max_num_queries(4 if connection.vendor == "postgresql" else 2):
        written = writeback.write_back(owner="a", results=results, now=now)
    assert written == {j.id for j in got}
    for i, r in enumerate(results):
        row = Job.objects.get(id=r.job_id)
        assert row.status == r.status
        assert (row.bucket, row.shard) == (r.bucket, r.shard)
        assert (row.delivered_at == now) == (r.status == "delivered")
        assert row.attempts == 1  # the one write counts the attempt
        assert (row.last_attempt_at, row.last_attempt_ms) == (started, i)
        assert row.last_status_code == r.status_code
    # Written once: a second write-back of the same results finds nothing pending there.
    assert writeback.write_back(owner="a", results=results[::4], now=now) == set()


def test_checkpoint_advances_only_past_drained_buckets_and_fenced(team, base) -> None:
    jobs = schedule(team, base, n=5)
    shard = jobs[0].shard
    epoch = leases.lease_acquire(owner="a", shards=[shard], now=base, until=base + L)[shard]
    bucket = keys.bucket_of(base, 60)
    later = bucket + timedelta(minutes=10)
    # Shard still holds pending rows in ``bucket``: cannot pass it.
    now = base + timedelta(seconds=1)
    assert checkpoints.checkpoint_advance(owner="a", targets={shard: (epoch, later)}, now=now) == {}
    # Up to just before it is fine.
    before = bucket - timedelta(minutes=1)
    moved = checkpoints.checkpoint_advance(owner="a", targets={shard: (epoch, before)}, now=now)
    assert moved == {shard: before}
    # Wrong epoch: nothing.
    other = jobs[0].shard + 1 if jobs[0].shard < 63 else 0
    assert (
        checkpoints.checkpoint_advance(owner="a", targets={other: (epoch, before)}, now=now) == {}
    )
    Job.objects.filter(shard=shard).update(status="delivered")
    moved = checkpoints.checkpoint_advance(owner="a", targets={shard: (epoch, later)}, now=now)
    assert moved == {shard: later}
    assert ShardCheckpoint.objects.get(shard=shard).last_drained == later
    # Never backwards.
    assert (
        checkpoints.checkpoint_advance(owner="a", targets={shard: (epoch, before)}, now=now) == {}
    )


def test_frontier_finds_first_non_empty_bucket(team, base) -> None:
    far = base + timedelta(minutes=30)
    near = schedule(team, base, n=3)
    later = schedule(team, far, n=3)
    shards = {j.shard for j in near + later}
    result = checkpoints.frontier(shards=range(64), open_bucket=far + timedelta(hours=1))
    for shard in range(64):
        checkpoint, first = result[shard].checkpoint, result[shard].bucket
        assert checkpoint is None
        assert (result[shard].next_due is None) == (first is None)
        if shard in {j.shard for j in near}:
            assert first == keys.bucket_of(base, 60)
        elif shard in shards:
            assert first == keys.bucket_of(far, 60)
        else:
            assert first is None


def test_write_back_with_the_batch_epoch_checks_that_lease(team, base) -> None:
    """Delivered rows of one lease are fenced on that lease at the read's epoch."""
    got, shard, _bucket, now = claimed_by_a(team, base, n=10)
    assert got
    epoch = ShardLease.objects.get(shard=shard).epoch

    def results(at_epoch):
        return [Result(j.id, "delivered", j.due_at, j.bucket, j.shard, epoch=at_epoch) for j in got]

    # An epoch that is not the read's writes nothing ...
    assert writeback.write_back(owner="a", results=results(epoch + 1), now=now) == set()
    # ... another owner neither ...
    assert writeback.write_back(owner="b", results=results(epoch), now=now) == set()
    # ... and the lease's own epoch writes them all.
    assert writeback.write_back(owner="a", results=results(epoch), now=now) == {j.id for j in got}
    assert set(Job.objects.filter(id__in=[j.id for j in got]).values_list("status", flat=True)) == {
        JobStatus.DELIVERED
    }


def test_a_read_decodes_each_distinct_request_once(team, base) -> None:
    jobs = schedule(team, base, n=300)
    shard = collections.Counter(j.shard for j in jobs).most_common(1)[0][0]
    mine = sorted((j for j in jobs if j.shard == shard), key=lambda j: j.due_at)
    shaped = {"method": "PUT", "format": "payload"}
    Job.objects.filter(id__in=[j.id for j in mine[:-1]]).update(request=shaped)
    Job.objects.filter(id=mine[-1].id).update(request={"method": "PATCH"})
    epoch = leases.lease_acquire(owner="a", shards=[shard], now=base, until=base + L)[shard]
    got = take.batch_take(
        owner="a",
        epoch=epoch,
        bucket=keys.bucket_of(base, 60),
        shard=shard,
        now=base + timedelta(seconds=10),
        limit=500,
    )
    by_id = {job.id: job for job in got}
    assert len(by_id) == len(mine) >= 3
    same = [by_id[j.id].request for j in mine[:-1]]
    assert all(r == shaped for r in same)
    assert all(r is same[0] for r in same)  # one decode, one dict shared
    assert by_id[mine[-1].id].request == {"method": "PATCH"}
