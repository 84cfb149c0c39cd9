"""Property tests for the pure key arithmetic (no database)."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import mmh3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling import keys

aware = st.datetimes(
    min_value=datetime(1971, 1, 1),
    max_value=datetime(2200, 1, 1),
    timezones=st.sampled_from(
        [UTC, timezone(timedelta(hours=5, minutes=30)), ZoneInfo("America/New_York")]
    ),
)
widths = st.sampled_from([1, 5, 30, 60, 300, 3600, 86400]) | st.integers(
    min_value=1, max_value=10**6
)
ids = st.uuids() | st.text(min_size=1, max_size=64)


@given(due=aware, width=widths)
def test_bucket_contains_due_time_and_starts_on_a_multiple(due: datetime, width: int) -> None:
    bucket = keys.bucket_of(due, width)
    assert bucket.tzinfo == UTC
    assert bucket <= due < bucket + timedelta(seconds=width)
    since_epoch = bucket - keys.EPOCH
    assert since_epoch % timedelta(seconds=width) == timedelta(0)


@given(due=aware, width=widths)
def test_bucket_is_idempotent_and_boundaries_are_exact(due: datetime, width: int) -> None:
    bucket = keys.bucket_of(due, width)
    assert keys.bucket_of(bucket, width) == bucket
    assert keys.is_bucket_start(bucket, width)
    end = keys.bucket_end(bucket, width)
    assert keys.bucket_of(end, width) == end
    assert keys.bucket_of(end - timedelta(microseconds=1), width) == bucket


@given(due=aware, width=widths)
def test_bucket_ignores_the_offset_it_was_written_in(due: datetime, width: int) -> None:
    assert keys.bucket_of(due, width) == keys.bucket_of(due.astimezone(UTC), width)


def test_leap_day_and_dst_boundaries() -> None:
    leap = datetime(2028, 2, 29, 23, 59, 59, 999999, tzinfo=UTC)
    assert keys.bucket_of(leap, 60) == datetime(2028, 2, 29, 23, 59, tzinfo=UTC)
    assert keys.bucket_of(leap + timedelta(microseconds=1), 86400) == datetime(
        2028, 3, 1, tzinfo=UTC
    )
    assert keys.bucket_of(datetime(2028, 2, 29, 12, tzinfo=UTC), 86400) == datetime(
        2028, 2, 29, tzinfo=UTC
    )
    # The two 01:30s of a New York autumn DST change are an hour apart in UTC.
    ny = ZoneInfo("America/New_York")
    first = datetime(2026, 11, 1, 1, 30, tzinfo=ny, fold=0)
    second = datetime(2026, 11, 1, 1, 30, tzinfo=ny, fold=1)
    assert keys.bucket_of(first, 60) == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)
    assert keys.bucket_of(second, 60) == datetime(2026, 11, 1, 6, 30, tzinfo=UTC)
    # Spring forward: 03:00 local is 07:00 UTC, one hour-bucket after 01:59 EST.
    assert keys.bucket_of(datetime(2026, 3, 8, 3, 0, tzinfo=ny), 3600) == datetime(
        2026, 3, 8, 7, tzinfo=UTC
    )


def test_naive_datetime_and_bad_width_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        keys.bucket_of(datetime(2027, 1, 1), 60)
    for width in (0, -60, 1.5, True):
        with pytest.raises(ValueError, match="width"):
            keys.bucket_of(datetime(2027, 1, 1, tzinfo=UTC), width)  # type: ignore[arg-type]


@given(job_id=ids, count=st.integers(min_value=1, max_value=4096))
def test_shard_is_deterministic_in_range_and_the_public_formula(
    job_id: uuid.UUID | str, count: int
) -> None:
    shard = keys.shard_of(job_id, count)
    assert 0 <= shard < count
    assert shard == keys.shard_of(job_id, count)
    assert shard == mmh3.hash(str(job_id), signed=False) % count


@given(
    job_ids=st.lists(st.uuids().map(str), max_size=20),
    count=st.integers(min_value=1, max_value=4096),
)
def test_shards_of_many_ids_are_each_ones_shard(job_ids: list[str], count: int) -> None:
    assert keys.shards_of(job_ids, count) == [keys.shard_of(i, count) for i in job_ids]


def test_documented_example() -> None:
    assert keys.shard_of("j-81f2", 100) == mmh3.hash("j-81f2", signed=False) % 100


def _shard_counts(n: int, count: int, seed: int) -> Counter[int]:
    rng = random.Random(seed)
    return Counter(
        keys.shard_of(uuid.UUID(int=rng.getrandbits(128), version=4), count) for _ in range(n)
    )


def test_shards_pass_a_chi_square_test_over_100k_ids_at_64() -> None:
    # 100k ids put ~1,562 in each shard (one standard deviation is 2.5%), so a
    # fair hash still leaves some shard past 5% about half the time: the right
    # test at this size is goodness of fit. Critical chi-square, 63 dof, p=0.001.
    n, count = 100_000, 64
    counts = _shard_counts(n, count, seed=64)
    expected = n / count
    chi2 = sum((counts[s] - expected) ** 2 / expected for s in range(count))
    assert chi2 < 103.44, f"chi-square {chi2:.1f} says the shards are not uniform"


def test_every_shard_within_five_percent_over_a_million_ids_at_64() -> None:
    n, count = 1_000_000, 64
    counts = _shard_counts(n, count, seed=1)
    expected = n / count
    worst = max(abs(counts[s] - expected) / expected for s in range(count))
    assert worst < 0.05, f"worst shard deviates {worst:.3%} from uniform"


def test_shard_count_must_be_positive() -> None:
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError):
            keys.shard_of("x", bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            keys.shards_of(["x"], bad)  # type: ignore[arg-type]


@given(job_id=st.uuids(), window=st.integers(min_value=0, max_value=7 * 86400))
def test_spread_offset_stays_in_window(job_id: uuid.UUID, window: int) -> None:
    offset = keys.spread_offset(job_id, window)
    assert timedelta(0) <= offset <= timedelta(seconds=window)
    assert offset == keys.spread_offset(job_id, window)


def test_buckets_between_is_inclusive() -> None:
    start = datetime(2027, 1, 1, 0, 0, 30, tzinfo=UTC)
    got = list(keys.buckets_between(start, start + timedelta(minutes=2), 60))
    assert got == [datetime(2027, 1, 1, 0, m, tzinfo=UTC) for m in range(3)]
