"""Read cursors (polling.reading.cursors): where the next read of a (shard, bucket) starts."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from polling.dispatch.base import ClaimedJob
from polling.reading.cursors import RESCAN_BACKOFF, WOKEN_RESCAN_SECONDS, ReadCursors
from tests.support.clock import FakeMonotonic

BUCKET = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def job(seconds: float, shard: int = 3) -> ClaimedJob:
    return ClaimedJob(
        id=uuid.uuid4(), team_id=1, due_at=BUCKET + timedelta(seconds=seconds), bucket=BUCKET,
        shard=shard, attempt=1, target_kind="handler", target="noop", payload={}, metadata={},
        expires_at=None,
    )  # fmt: skip


def test_nothing_in_flight_reads_from_the_start() -> None:
    read = ReadCursors().plan(3, BUCKET, 100)
    assert (read.after, read.skip, read.fetch, read.rescan_below) == (None, (), 100, None)


def test_reads_go_on_past_the_jobs_in_flight_and_restart_when_none_are_left() -> None:
    cursors = ReadCursors()
    first = [job(1), job(2), job(2)]
    cursors.handed(first)
    read = cursors.plan(3, BUCKET, 100)
    # From the greatest due time handed out, passing over the two in flight at it.
    assert read.after == BUCKET + timedelta(seconds=2) and read.fetch == 102
    assert set(read.skip) == {j.id for j in first}
    assert cursors.plan(4, BUCKET, 100).after is None  # another shard: its own cursor
    cursors.resolved(first[1:])
    assert cursors.plan(3, BUCKET, 100).fetch == 100  # none in flight at the top any more
    cursors.resolved(first[:1])
    assert len(cursors) == 0 and cursors.plan(3, BUCKET, 100).after is None


def test_a_rescan_comes_at_the_interval_and_backs_off_while_it_finds_nothing(monkeypatch) -> None:
    clock = FakeMonotonic()
    monkeypatch.setattr("polling.reading.cursors.time", clock)
    cursors = ReadCursors(rescan_seconds=1.0)
    out = [job(5), job(6)]
    cursors.handed(out)
    assert cursors.plan(3, BUCKET, 10).rescan_below is None
    clock.shift(1.01)
    read = cursors.plan(3, BUCKET, 10)
    # From the start, passing over everything in flight.
    assert read.after is None and read.fetch == 12 and read.rescan_below == out[1].due_at
    intervals = []
    for _ in range(4):  # nothing late found: 2 s, 4 s, then the cap
        cursors.rescanned(3, BUCKET, read, [])
        waited = 0.0
        while cursors.plan(3, BUCKET, 10).rescan_below is None:
            clock.shift(0.5)
            waited += 0.5
        intervals.append(waited)
        read = cursors.plan(3, BUCKET, 10)
    assert intervals == [2.0, 4.0, float(RESCAN_BACKOFF), float(RESCAN_BACKOFF)]
    cursors.rescanned(3, BUCKET, read, [job(1)])  # a late row: back to every second
    clock.shift(1.01)
    assert cursors.plan(3, BUCKET, 10).rescan_below is not None


def test_a_woken_shard_rescans_soon_but_not_more_often_than_the_woken_interval(
    monkeypatch,
) -> None:
    clock = FakeMonotonic()
    monkeypatch.setattr("polling.reading.cursors.time", clock)
    cursors = ReadCursors(rescan_seconds=1.0)
    cursors.handed([job(5), job(6)])
    cursors.handed([job(5, shard=4)])
    cursors.woken({3})  # a callback was written into shard 3 (maybe behind its cursor)
    assert cursors.plan(3, BUCKET, 10).rescan_below is None  # just started: not yet
    clock.shift(WOKEN_RESCAN_SECONDS + 0.01)
    read = cursors.plan(3, BUCKET, 10)
    assert read.after is None and read.rescan_below == BUCKET + timedelta(seconds=6)
    assert cursors.plan(4, BUCKET, 10).rescan_below is None  # not woken: its own interval
    cursors.rescanned(3, BUCKET, read, [])
    cursors.woken(None)  # any shard (a listener back after a reconnect)
    assert cursors.plan(3, BUCKET, 10).rescan_below is None  # rescanned just now
    clock.shift(WOKEN_RESCAN_SECONDS + 0.01)
    assert cursors.plan(3, BUCKET, 10).rescan_below is not None
    assert cursors.plan(4, BUCKET, 10).rescan_below is not None
