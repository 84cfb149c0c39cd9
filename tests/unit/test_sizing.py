"""The capacity arithmetic of DESIGN.md "Sizing"."""

from __future__ import annotations

import pytest

from scheduling.sharding import sizing


def test_design_example() -> None:
    plan = sizing.plan(peak_per_minute=1_000_000, shards=100, pollers=10, bucket_seconds=60)
    assert plan.jobs_per_partition == pytest.approx(10_000)
    assert round(plan.partition_drain_per_second) == 167
    assert round(plan.per_poller_per_second) == 1667
    assert plan.warnings == []


def test_width_scales_partition_size_not_rates() -> None:
    plan = sizing.plan(peak_per_minute=600_000, shards=10, pollers=5, bucket_seconds=30)
    assert plan.jobs_per_partition == pytest.approx(30_000)
    assert plan.partition_drain_per_second == pytest.approx(1000)
    assert plan.per_poller_per_second == pytest.approx(2000)


def test_warnings() -> None:
    standby = sizing.plan(peak_per_minute=60_000, shards=4, pollers=6)
    assert standby.active_pollers == 4
    assert any("2 will be standbys" in w for w in standby.warnings)
    assert standby.per_poller_per_second == pytest.approx(250)
    big = sizing.plan(peak_per_minute=10_000_000, shards=16, pollers=16)
    assert any("large for a 60 s bucket" in w for w in big.warnings)
    slow = sizing.plan(
        peak_per_minute=1_000_000, shards=64, pollers=2, poller_capacity_per_second=5000
    )
    assert any("above the measured single-poller capacity" in w for w in slow.warnings)
    hot = sizing.plan(
        peak_per_minute=1_000_000, shards=2, pollers=2, poller_capacity_per_second=5000
    )
    assert any("add shards" in w for w in hot.warnings)


def test_recommendation() -> None:
    advice = sizing.recommend(
        peak_per_minute=1_000_000, precision_seconds=60, poller_capacity_per_second=5000
    )
    assert advice.pollers == 5  # 16,667 jobs/s at 70% of 5,000 each
    assert advice.shards == 32 and advice.shards >= 4 * advice.pollers
    assert advice.bucket_seconds == 60
    narrow = sizing.recommend(
        peak_per_minute=1_000_000, precision_seconds=7, poller_capacity_per_second=5000
    )
    assert narrow.bucket_seconds == 5
    huge = sizing.recommend(
        peak_per_minute=600_000_000, precision_seconds=3600, poller_capacity_per_second=100_000
    )
    per_partition = 600_000_000 / 60 * huge.bucket_seconds / huge.shards
    assert per_partition <= sizing.LARGE_PARTITION_ROWS


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        sizing.plan(peak_per_minute=1, shards=0, pollers=1)
    with pytest.raises(ValueError):
        sizing.recommend(peak_per_minute=1, precision_seconds=0, poller_capacity_per_second=1)
