"""The shard count of each bucket: looked up in the schedule, recorded at first write.

Once a bucket's count is recorded it never changes, so a committed value is safe
to cache for the life of the process.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from datetime import datetime

from django.db import transaction

from scheduling.models import Bucket, ShardCountSchedule

_committed_counts: dict[datetime, int] = {}


def _remember(counts: dict[datetime, int]) -> None:
    _committed_counts.update(counts)


def forget_cached_counts() -> None:
    """Drop the process cache (tests that roll back recorded buckets call this)."""
    _committed_counts.clear()


def schedule_rows() -> list[tuple[datetime, int]]:
    """Return the schedule as ``(effective_from, shard_count)`` pairs, oldest first."""
    return list(
        ShardCountSchedule.objects.order_by("effective_from").values_list(
            "effective_from", "shard_count"
        )
    )


def count_in_force(schedule: list[tuple[datetime, int]], bucket: datetime) -> int:
    """Return the schedule's shard count for ``bucket``.

    The row with the greatest ``effective_from <= bucket`` wins; a bucket before
    the first row takes the first row's count.
    """
    if not schedule:
        raise LookupError("the shard-count schedule is empty; run migrations")
    index = bisect_right([start for start, _ in schedule], bucket)
    return schedule[max(index - 1, 0)][1]


def shard_counts_record(buckets: Iterable[datetime]) -> dict[datetime, int]:
    """Return each bucket's shard count, recording the ones not yet recorded.

    Call inside the transaction that writes jobs into these buckets. Recording is
    ``INSERT ... ON CONFLICT DO NOTHING`` followed by a read, so when writers race
    into a new bucket exactly one count is stored and every writer uses it.
    Costs at most three statements whatever the number of buckets.
    """
    wanted = set(buckets)
    counts = {b: _committed_counts[b] for b in wanted if b in _committed_counts}
    missing = wanted - counts.keys()
    if not missing:
        return counts
    found = dict(Bucket.objects.filter(start__in=missing).values_list("start", "shard_count"))
    absent = missing - found.keys()
    if absent:
        schedule = schedule_rows()
        Bucket.objects.bulk_create(
            [Bucket(start=b, shard_count=count_in_force(schedule, b)) for b in absent],
            ignore_conflicts=True,
        )
        found.update(Bucket.objects.filter(start__in=absent).values_list("start", "shard_count"))
    # Cache only what is committed: a rolled-back first write must not pin a count.
    transaction.on_commit(lambda: _remember(dict(found)))
    counts.update(found)
    return counts


def shard_count_of(bucket: datetime) -> int | None:
    """Return the recorded shard count of ``bucket``, or None if nothing was written."""
    if bucket in _committed_counts:
        return _committed_counts[bucket]
    count = Bucket.objects.filter(start=bucket).values_list("shard_count", flat=True).first()
    if count is not None and not transaction.get_connection().in_atomic_block:
        _remember({bucket: count})
    return count


def shard_count_for(bucket: datetime) -> int:
    """The count ``bucket`` has, or would record if its first write happened now."""
    recorded = shard_count_of(bucket)
    return recorded if recorded is not None else count_in_force(schedule_rows(), bucket)
