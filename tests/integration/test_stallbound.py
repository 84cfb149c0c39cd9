"""A poller's transactions are bounded (polling/ownership/stall_bounds.py), on PostgreSQL.

Outside a test transaction: the bounds are set by the outermost transaction only,
as in a poller. The multi-process case (a poller stopped inside a read, another
taking over) is ``tests/e2e/test_pollers_multiprocess.py``.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.test import override_settings

from polling.common.sql import fetch_all
from polling.models import ShardLease
from polling.ownership import leases, stall_bounds
from polling.ownership.registration import shard_rows_ensure
from polling.reading import take
from scheduling import keys
from scheduling.jobs.inflight import WINDOW_LOCK_CLASS
from scheduling.jobs.services import job_schedule_many
from scheduling.models import InFlightBatch
from tests.support import procs
from tests.support.factories import job_spec, team_create
from tests.support.pollers import future_base

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="idle_in_transaction_session_timeout and lock_timeout: PostgreSQL",
    ),
]

SETTINGS_SQL = (
    "SELECT current_setting('idle_in_transaction_session_timeout'), current_setting('lock_timeout')"
)


def settings_now() -> tuple[str, str]:
    ((idle, lock),) = fetch_all(SETTINGS_SQL, [])
    return idle, lock


@pytest.fixture
def session_bound():
    """Call it to bound this thread's connections as a ``runpoller`` does; undone after."""
    yield stall_bounds.session_bound_install
    stall_bounds.session_bound_remove()


@pytest.mark.skipif(
    getattr(settings, "SENDLATER_PGBOUNCER", False),
    reason="a session setting: not through pgbouncer's transaction pooling (the next test)",
)
@override_settings(SENDLATER_LEASE_SECONDS=3)
def test_a_poller_thread_s_connections_carry_the_idle_bound(session_bound) -> None:
    session_bound()
    assert settings_now() == ("3s", "0")
    connection.close()
    assert settings_now() == ("3s", "0")  # a new connection of the thread too
    other: list[tuple[str, str]] = []
    thread = threading.Thread(target=lambda: (other.append(settings_now()), connection.close()))
    thread.start()
    thread.join()
    assert other == [("0", "0")]  # another thread's (a task handler's): unbounded


@override_settings(SENDLATER_LEASE_SECONDS=3)
def test_the_lock_bound_holds_inside_the_outermost_transaction_and_goes_with_it() -> None:
    assert stall_bounds.lock_wait_ms() == 750  # a quarter lease, under LOCK_WAIT_MS
    with stall_bounds.bounded_atomic(lock_wait=True) as bounded:
        assert bounded
        fetch_all(take.WINDOW_LOCK_BOUNDED_SQL, [stall_bounds.lock_wait_param(), 1, 2])
        # (behind pgbouncer the transaction sets its idle bound too: the next test)
        idle = "3s" if getattr(settings, "SENDLATER_PGBOUNCER", False) else "0"
        assert settings_now() == (idle, "750ms")
    assert settings_now() == ("0", "0")
    # inside a caller's transaction: left alone
    with transaction.atomic(), stall_bounds.bounded_atomic(lock_wait=True) as bounded:
        assert not bounded


@override_settings(SENDLATER_LEASE_SECONDS=3, SENDLATER_PGBOUNCER=True)
def test_behind_pgbouncer_each_transaction_sets_the_idle_bound_for_itself(session_bound) -> None:
    session_bound()
    assert settings_now() == ("0", "0")  # no session setting through a pooler
    with stall_bounds.bounded_atomic():
        assert settings_now() == ("3s", "0")
    assert settings_now() == ("0", "0")


@override_settings(SENDLATER_LEASE_SECONDS=60)
def test_lock_wait_is_capped() -> None:
    assert stall_bounds.lock_wait_ms() == stall_bounds.LOCK_WAIT_MS


@pytest.fixture
def leased_shard():
    """Jobs due in a shard that "a" leases: ``(shard, epoch, bucket, now, due there)``."""
    shard_rows_ensure(shard_count=64)
    base = future_base()
    team = team_create(slug="stall")
    specs = [job_spec(due_at=base + timedelta(seconds=5, milliseconds=i)) for i in range(5)]
    jobs = [job for job, _ in job_schedule_many(team=team, specs=specs, now=base)]
    shard = jobs[0].shard
    due = sum(1 for job in jobs if job.shard == shard)
    epoch = leases.lease_acquire(
        owner="a", shards=[shard], now=base, until=base + timedelta(seconds=15)
    )[shard]
    return shard, epoch, keys.bucket_of(base, 60), base + timedelta(seconds=10), due


@override_settings(SENDLATER_LEASE_SECONDS=2)
def test_a_read_gives_a_held_window_up_and_reads_it_once_free(leased_shard) -> None:
    shard, epoch, bucket, now, due = leased_shard

    def read_shard():
        return take.batch_take(
            owner="a", epoch=epoch, bucket=bucket, shard=shard, now=now, limit=50
        )

    with psycopg.connect(procs.test_database_url()) as other:  # a stopped poller's window
        other.execute("SELECT pg_advisory_xact_lock(%s, %s)", [WINDOW_LOCK_CLASS, shard])
        started = time.monotonic()
        with pytest.raises(stall_bounds.WindowBusy):
            read_shard()
        waited = time.monotonic() - started
        assert 0.4 <= waited < 3  # the bounded wait (500 ms), not the holder's time
        assert not InFlightBatch.objects.exists()  # nothing recorded
        with pytest.raises(stall_bounds.WindowBusy):  # the key reads give way the same
            take.flow_take(
                owner="a",
                leases={shard: epoch},
                team_id=1,
                key="k",
                after_bucket=bucket - timedelta(seconds=60),
                open_bucket=bucket,
                now=now,
                limit=10,
            )
        other.rollback()
    assert settings_now() == ("0", "0")  # rolled back with the transaction
    assert len(read_shard()) == due


@override_settings(SENDLATER_LEASE_SECONDS=1)
def test_a_transaction_left_idle_for_a_lease_is_ended_and_its_locks_let_go(
    session_bound,
) -> None:
    session_bound()
    shard_rows_ensure(shard_count=64)
    with pytest.raises(DatabaseError), stall_bounds.bounded_atomic():
        fetch_all("SELECT pg_advisory_xact_lock(%s, %s)", [WINDOW_LOCK_CLASS, 7])
        fetch_all("UPDATE polling_shardlease SET owner = 'stalled' WHERE shard = 7", [])
        # Stopped here past the lease: PostgreSQL ends the session while this
        # process still sleeps, so another session gets the lock and the row.
        with psycopg.connect(procs.test_database_url()) as other:
            deadline = time.monotonic() + 10
            while True:
                free = other.execute(
                    "SELECT pg_try_advisory_xact_lock(%s, %s)", [WINDOW_LOCK_CLASS, 7]
                ).fetchone()[0]
                other.rollback()
                if free or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert free
            other.execute("SET lock_timeout = '2s'")
            other.execute("UPDATE polling_shardlease SET owner = NULL WHERE shard = 7")
            other.commit()
        fetch_all("SELECT 1", [])  # waking: the connection is gone
    assert fetch_all("SELECT 1", []) == [(1,)]  # the next statement connects again
    assert ShardLease.objects.get(shard=7).owner is None  # the stalled write never landed


@override_settings(SENDLATER_LEASE_SECONDS=2)
def test_the_loop_passes_a_held_window_by_and_reads_it_on_a_later_pass() -> None:
    """A poller whose read of one shard gives way goes on with the other shards in
    the same pass and reads the held one once the lock is free."""
    from polling import metrics
    from scheduling.models import Job
    from tests.support.pollers import RecordingSink, poller_build

    base = future_base()
    sink = RecordingSink()
    poller = poller_build(sink=sink)
    poller.iterate(now=base)  # leases and checkpoints at ``base``
    team = team_create(slug="stall-loop")
    specs = [job_spec(due_at=base + timedelta(seconds=5, milliseconds=i)) for i in range(20)]
    jobs = [job for job, _ in job_schedule_many(team=team, specs=specs, now=base)]
    held = jobs[0].shard
    others = [job for job in jobs if job.shard != held]
    busy_before = metrics.WINDOWS_BUSY._value.get()
    now = base + timedelta(seconds=10)
    with psycopg.connect(procs.test_database_url()) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s, %s)", [WINDOW_LOCK_CLASS, held])
        for _ in range(5):
            poller.iterate(now=now)
        assert metrics.WINDOWS_BUSY._value.get() > busy_before
        assert {job.id for job in sink.seen} == {job.id for job in others}
        other.rollback()
    for _ in range(5):
        poller.iterate(now=now)
    assert {job.id for job in sink.seen} == {job.id for job in jobs}
    assert Job.objects.filter(status="delivered").count() == len(jobs)
    poller.shutdown()
