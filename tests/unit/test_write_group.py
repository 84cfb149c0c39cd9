"""The pipeline's write stage (polling.engine.write_group): when a group is due, and
what leaves it for its write. The write itself is covered by tests/integration."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from polling.dispatch.base import ClaimedJob, Outcome
from polling.engine.write_group import WriteGroup
from tests.support.clock import FakeMonotonic

BUCKET = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def job(batch: int = 1) -> ClaimedJob:
    return ClaimedJob(
        id=uuid.uuid4(), team_id=1, due_at=BUCKET, bucket=BUCKET, shard=3, attempt=1,
        target_kind="handler", target="noop", payload={}, metadata={}, expires_at=None,
        batch=batch,
    )  # fmt: skip


def group(clock: FakeMonotonic, size: int = 3, seconds: float = 0.5) -> WriteGroup:
    return WriteGroup(owner="p1", group_size=size, group_seconds=seconds, clock=clock)


def test_an_empty_group_is_never_due_and_has_nothing_to_wait_for() -> None:
    ready = group(FakeMonotonic())
    assert not ready.due() and ready.seconds_to_write() is None and len(ready) == 0
    assert not ready.take()


def test_a_group_is_due_when_full_or_when_its_oldest_result_is_old_enough() -> None:
    clock = FakeMonotonic()
    ready = group(clock, size=3, seconds=0.5)
    first = job()
    ready.answered(first, Outcome(first.id, "delivered"))
    assert not ready.due() and ready.seconds_to_write() == 0.5
    clock.shift(0.2)
    ready.expired(job())  # a later result does not restart the wait
    assert not ready.due() and abs(ready.seconds_to_write() - 0.3) < 1e-9
    ready.released([job()])
    assert len(ready) == 3 and ready.due()  # full
    taken = ready.take()
    assert not ready.due() and ready.seconds_to_write() is None
    ready.answered(first, Outcome(first.id, "retry"))
    clock.shift(0.49)
    assert not ready.due()
    clock.shift(0.01)
    assert ready.due() and ready.seconds_to_write() == 0.0  # old enough
    assert [len(g) for g in taken.groups()] == [1, 1, 1] and not taken.lost


def test_take_hands_each_result_with_its_outcome_and_empties_the_group() -> None:
    ready = group(FakeMonotonic())
    a, b, c = job(), job(), job()
    ready.answered(a, Outcome(a.id, "delivered"))
    ready.answered(b, Outcome(b.id, "retry"))
    ready.released([c])
    ready.released([])  # nothing handed back: nothing starts the wait
    taken = ready.take()
    assert taken.jobs == [a, b] and [o.result for o in taken.outcomes] == ["delivered", "retry"]
    assert taken.released == [c] and taken.expired == []
    assert len(ready) == 0 and not ready.take()


def test_clear_drops_every_result_unwritten() -> None:
    ready = group(FakeMonotonic())
    ready.read([job(batch=7), job(batch=7)])
    ready.expired(job(batch=7))
    ready.clear()
    assert len(ready) == 0 and ready.seconds_to_write() is None and not ready.take()


@pytest.mark.django_db
def test_a_write_longer_than_a_third_of_the_lease_is_reported(monkeypatch, caplog) -> None:
    """A write-back that holds the poller's thread past a lease renewal is logged and
    counted (a slow statement: a plan gone wrong, a lock wait)."""
    from polling import metrics
    from polling.engine import write_group

    clock = FakeMonotonic()
    real = write_group.results_build
    takes = [0.0]  # how long the next write's statements take

    def slow(**kwargs):  # type: ignore[no-untyped-def]
        clock.shift(takes[0])
        return real(**kwargs)

    monkeypatch.setattr(write_group, "results_build", slow)
    ready = WriteGroup(owner="p1", group_size=1, group_seconds=0.0, clock=clock, slow_seconds=5)
    before = metrics.WRITEBACK_SLOW._value.get()
    for takes[0], warned in ((4.9, False), (5.1, True)):
        caplog.clear()
        one = job()
        ready.answered(one, Outcome(one.id, "delivered"))
        ready.write(ready.take(), BUCKET)  # no such row: fenced out, nothing written
        slow_lines = [r for r in caplog.records if "write-back of 1 results took" in r.message]
        assert bool(slow_lines) is warned, caplog.text
    assert metrics.WRITEBACK_SLOW._value.get() == before + 1
    assert "took 5.1s; leases are renewed every 5s" in slow_lines[0].message
