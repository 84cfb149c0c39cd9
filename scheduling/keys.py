"""Pure bucket and shard arithmetic: where a job lives.

No Django imports: clients, pollers, benchmarks and tests all share this module,
and the formula is public (docs/keys.md).

- bucket = the due time truncated to a multiple of the width W, counted from the
  Unix epoch in UTC (so boundaries ignore DST and fall exactly on W multiples).
- shard = unsigned 32-bit MurmurHash3 (seed 0) of ``str(job_id)`` modulo the
  shard count recorded for the bucket.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from uuid import UUID

import mmh3

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_MICROS_PER_SECOND = 1_000_000


def _require_aware(moment: datetime) -> None:
    if moment.tzinfo is None or moment.tzinfo.utcoffset(moment) is None:
        raise ValueError("datetime must be timezone-aware")


def _require_width(width_seconds: int) -> None:
    if isinstance(width_seconds, bool) or not isinstance(width_seconds, int) or width_seconds < 1:
        raise ValueError("bucket width must be a positive whole number of seconds")


def bucket_of(due_at: datetime, width_seconds: int) -> datetime:
    """Return the UTC start of the bucket holding ``due_at``.

    Exact integer arithmetic in microseconds since the epoch, so a due time on a
    boundary belongs to the bucket that starts there and nothing drifts.
    """
    _require_aware(due_at)
    _require_width(width_seconds)
    micros = (due_at - EPOCH) // _MICROSECOND
    width_micros = width_seconds * _MICROS_PER_SECOND
    return EPOCH + timedelta(microseconds=micros - micros % width_micros)


def bucket_end(bucket: datetime, width_seconds: int) -> datetime:
    """Return the first instant after ``bucket`` (the start of the next one)."""
    return bucket + timedelta(seconds=width_seconds)


def is_bucket_start(moment: datetime, width_seconds: int) -> bool:
    """True when ``moment`` is exactly a bucket boundary."""
    return bucket_of(moment, width_seconds) == moment


def buckets_between(first: datetime, last: datetime, width_seconds: int) -> Iterator[datetime]:
    """Yield bucket starts from ``first``'s bucket to ``last``'s, inclusive."""
    step = timedelta(seconds=width_seconds)
    current = bucket_of(first, width_seconds)
    stop = bucket_of(last, width_seconds)
    while current <= stop:
        yield current
        current += step


def shard_of(job_id: UUID | str, shard_count: int) -> int:
    """Return the shard of ``job_id`` among ``shard_count`` shards.

    ``mmh3.hash(str(job_id), signed=False) % shard_count``; a UUID is hashed in
    its canonical lowercase hyphenated form.
    """
    if isinstance(shard_count, bool) or not isinstance(shard_count, int) or shard_count < 1:
        raise ValueError("shard count must be a positive integer")
    return mmh3.hash(str(job_id), signed=False) % shard_count


def shards_of(job_ids: Iterable[str], shard_count: int) -> list[int]:
    """``shard_of`` of each of ``job_ids`` (canonical lowercase texts), the count
    checked once: the hash of many new ids without a call each."""
    if isinstance(shard_count, bool) or not isinstance(shard_count, int) or shard_count < 1:
        raise ValueError("shard count must be a positive integer")
    hash_ = mmh3.hash
    return [hash_(text, signed=False) % shard_count for text in job_ids]


def spread_offset(job_id: UUID | str, window_seconds: int) -> timedelta:
    """Return a deterministic offset in ``[0, window_seconds]`` for ``job_id``.

    Used to spread a flexible delivery window; a different seed from the shard
    hash so a job's place in its window does not correlate with its shard.
    """
    if window_seconds <= 0:
        return timedelta(0)
    window_micros = window_seconds * _MICROS_PER_SECOND
    return timedelta(
        microseconds=mmh3.hash64(str(job_id), seed=0x5E17, signed=False)[0] % (window_micros + 1)
    )
