"""The shard count of each bucket: looked up in the schedule, recorded at first write.

Once a bucket's count is recorded it never changes, so a committed value is safe
to cache for the life of the process.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

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


# Records the absent buckets with the count in force (count_in_force in SQL) and
# returns every wanted bucket's count, in one statement. A bucket a concurrent
# writer committed after this statement's snapshot is in neither half (ON
# CONFLICT skipped it, the read cannot see it); the caller reads those again.
# With an empty schedule nothing is inserted, and the ORM path raises.
RECORD_SQL = """
WITH wanted (start) AS (SELECT unnest(%(starts)s::timestamptz[])),
recorded AS (
    INSERT INTO scheduling_bucket (start, shard_count, recorded_at)
    SELECT w.start,
           COALESCE(
               (SELECT s.shard_count FROM scheduling_shardcountschedule s
                 WHERE s.effective_from <= w.start ORDER BY s.effective_from DESC LIMIT 1),
               (SELECT s.shard_count FROM scheduling_shardcountschedule s
                 ORDER BY s.effective_from LIMIT 1)),
           %(now)s
      FROM wanted w
     WHERE NOT EXISTS (SELECT 1 FROM scheduling_bucket b WHERE b.start = w.start)
       AND EXISTS (SELECT 1 FROM scheduling_shardcountschedule)
    ON CONFLICT (start) DO NOTHING
    RETURNING start, shard_count
)
SELECT start, shard_count FROM recorded
UNION ALL
SELECT b.start, b.shard_count FROM scheduling_bucket b JOIN wanted w ON b.start = w.start
"""


def _record_in_one_statement(missing: set[datetime]) -> dict[datetime, int]:
    with connection.cursor() as cursor:
        cursor.execute(RECORD_SQL, {"starts": sorted(missing), "now": timezone.now()})
        return dict(cursor.fetchall())


def shard_counts_record(buckets: Iterable[datetime]) -> dict[datetime, int]:
    """Return each bucket's shard count, recording the ones not yet recorded.

    Call inside the transaction that writes jobs into these buckets (or just before a
    single job's one-statement INSERT: a count is final once recorded, so it may
    stand even if that write then fails). Recording is
    ``INSERT ... ON CONFLICT DO NOTHING`` followed by a read, so when writers race
    into a new bucket exactly one count is stored and every writer uses it.
    One statement on PostgreSQL (``RECORD_SQL``, plus a read after a race); at
    most three elsewhere, whatever the number of buckets.
    """
    wanted = set(buckets)
    counts = {b: _committed_counts[b] for b in wanted if b in _committed_counts}
    missing = wanted - counts.keys()
    if not missing:
        return counts
    if connection.vendor == "postgresql":
        found = _record_in_one_statement(missing)
        lost = missing - found.keys()
        if lost:  # a race with a concurrent first write, or an empty schedule
            found.update(Bucket.objects.filter(start__in=lost).values_list("start", "shard_count"))
    else:
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


def shard_count_cached(bucket: datetime) -> int | None:
    """The recorded shard count of ``bucket`` if this process has it; no query."""
    return _committed_counts.get(bucket)


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


def shard_count_max() -> int:
    """The highest shard count of any schedule row or recorded bucket: the shard
    indices in use are ``range(shard_count_max())``."""
    scheduled = ShardCountSchedule.objects.aggregate(m=Max("shard_count"))["m"] or 0
    recorded = Bucket.objects.aggregate(m=Max("shard_count"))["m"] or 0
    return max(scheduled, recorded, 1)
