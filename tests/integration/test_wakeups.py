"""Wake-ups (polling.common.wakeups): a job a write-back inserts due now (a callback,
a topic's child) wakes its shard's owner when the transaction commits, not before,
and never for a rollback; on PostgreSQL other processes hear it through NOTIFY."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from polling.common.wakeups import WakeListener, Wakeup, due_now_written, payload_shards
from polling.writing.callbacks import events_insert
from scheduling.models import Job
from scheduling.sharding.clock import db_now
from tests.support.pollers import poller_build

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_wakeup_is_heard_at_commit_and_only_by_the_shards_owner() -> None:
    wakeup = Wakeup()
    with transaction.atomic():
        due_now_written({3, 5})
        assert not wakeup.relevant({3})  # not before the commit
    assert not wakeup.relevant({7})  # another poller's shards: forgotten
    due_now_written({3, 5})  # autocommit: heard at once
    assert wakeup.relevant({0, 5})
    wakeup.take()  # a pass starts
    assert not wakeup.relevant({5})


def test_a_rolled_back_write_wakes_nobody() -> None:
    wakeup = Wakeup()
    with pytest.raises(RuntimeError), transaction.atomic():
        due_now_written({1})
        raise RuntimeError("the write-back failed")
    assert not wakeup.relevant({1})
    assert not wakeup.wait(0)


def test_callback_events_wake_the_owners_of_their_shards(team) -> None:
    wakeup = Wakeup()
    now = db_now()
    with transaction.atomic():
        ids = events_insert(
            [(team.pk, "about", "http://127.0.0.1:9/hook", {"type": "job.delivered"})] * 3, now
        )
    shards = set(Job.objects.filter(id__in=ids).values_list("shard", flat=True))
    assert len(ids) == 3 and shards
    assert wakeup.relevant(shards)
    wakeup.take()
    assert not wakeup.relevant(set(range(1024)) - shards)


def test_notification_payloads() -> None:
    assert payload_shards("1,2,30") == [1, 2, 30]
    assert payload_shards("") is None  # too many shards to list: any
    assert payload_shards("x,1") is None  # not understood: wake anyway


def test_a_wakeup_for_an_owned_shard_ends_the_wait_between_passes() -> None:
    poller = poller_build("wake-1")
    poller.poll_interval = 60.0  # without a wake-up the wait would last a minute
    poller.iterate(now=db_now())  # takes its leases
    assert poller.leases
    shard = next(iter(poller.leases))
    done = threading.Event()

    def wait() -> None:
        poller._wait(60.0, since=time.monotonic() - 60)
        done.set()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    assert not done.wait(0.3)  # an idle poller waits
    poller.wakeup.notify({shard})
    assert done.wait(30), "a wake-up for an owned shard did not end the wait"
    poller.stop()


def test_a_wakeup_for_other_shards_does_not_end_the_wait() -> None:
    poller = poller_build("wake-2")
    poller.iterate(now=db_now())
    others = {max(poller.leases) + 1000}
    done = threading.Event()

    def wait() -> None:
        poller._wait(1.0, since=time.monotonic())
        done.set()

    waiter = threading.Thread(target=wait, daemon=True)
    started = time.monotonic()
    waiter.start()
    poller.wakeup.notify(others)
    assert done.wait(30)
    assert time.monotonic() - started >= 1.0  # waited its whole second
    poller.stop()


@pytest.mark.postgres
def test_a_listener_hears_another_connections_committed_wakeup() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY needs PostgreSQL (DATABASE_URL=postgres://...)")
    wakeup = Wakeup()
    listener = WakeListener(wakeup=wakeup, name="wake-3")
    listener._thread.start()
    try:
        assert listener.listening.wait(30), "the listener did not LISTEN"
        assert wakeup.wait(5)  # a (re)connection wakes once: what it may have missed
        wakeup.take()
        # Another process's write-back, as SQL:
        with connection.cursor() as cursor, transaction.atomic():
            cursor.execute("SELECT pg_notify('sendlater_due', '4,9')")
            assert not wakeup.wait(0.5)  # not before the commit
        assert wakeup.wait(30), "no notification after the commit"
        assert wakeup.relevant({9}) and not _relevant_after_clear(wakeup, {9})
    finally:
        listener.stop()


def _relevant_after_clear(wakeup: Wakeup, shards: set[int]) -> bool:
    wakeup.take()
    return wakeup.relevant(shards)


def test_the_run_loop_stops_promptly_while_idle() -> None:
    poller = poller_build("wake-4")
    poller.poll_interval = 60.0

    def run() -> None:
        try:
            poller.run()
        finally:
            connection.close()  # this thread's own

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    time.sleep(0.5)
    poller.stop()
    runner.join(30)
    assert not runner.is_alive()
