"""Capacity arithmetic from DESIGN.md "Sizing" (pure; no Django imports).

Peak P jobs due per minute, S shards, N pollers, bucket width W seconds:
a partition holds about P * W/60 / S jobs per bucket, drained at P / S / 60 per
second; each poller handles P / min(N, S) / 60 per second (pollers beyond S are
standbys and add nothing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Bucket widths worth choosing: divisors of an hour, so buckets line up with clocks.
STANDARD_WIDTHS_SECONDS = (1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
# Above this many rows a (bucket, shard) partition is a long range scan per bucket.
LARGE_PARTITION_ROWS = 50_000
# Plan for pollers running at this share of their measured capacity.
HEADROOM = 0.7


@dataclass(frozen=True)
class Plan:
    peak_per_minute: int
    shards: int
    pollers: int
    bucket_seconds: int
    jobs_per_partition: float
    partition_drain_per_second: float
    per_poller_per_second: float
    active_pollers: int
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Recommendation:
    shards: int
    bucket_seconds: int
    pollers: int
    reasons: list[str]


def plan(
    *,
    peak_per_minute: int,
    shards: int,
    pollers: int,
    bucket_seconds: int = 60,
    poller_capacity_per_second: float | None = None,
) -> Plan:
    """Return the sizing figures and warnings for one configuration."""
    if peak_per_minute < 0 or shards < 1 or pollers < 1 or bucket_seconds < 1:
        raise ValueError("peak must be >= 0 and shards, pollers, bucket width >= 1")
    per_second = peak_per_minute / 60
    jobs_per_partition = per_second * bucket_seconds / shards
    drain = per_second / shards
    active = min(pollers, shards)
    per_poller = per_second / active
    warnings: list[str] = []
    if pollers > shards:
        warnings.append(
            f"{pollers} pollers for {shards} shards: {pollers - shards} will be standbys "
            "(more pollers than shards add nothing; raise the shard count with a cutover)."
        )
    if jobs_per_partition > LARGE_PARTITION_ROWS:
        warnings.append(
            f"about {jobs_per_partition:,.0f} jobs per partition per bucket is large for a "
            f"{bucket_seconds} s bucket (over {LARGE_PARTITION_ROWS:,}): use more shards or "
            "a narrower bucket."
        )
    if poller_capacity_per_second:
        if per_poller > poller_capacity_per_second:
            warnings.append(
                f"each poller must handle about {per_poller:,.0f} jobs/s, above the measured "
                f"single-poller capacity of {poller_capacity_per_second:,.0f} jobs/s "
                "(bench/burst.py): add pollers (and shards if needed)."
            )
        if drain > poller_capacity_per_second:
            warnings.append(
                f"one partition must drain at about {drain:,.0f} jobs/s, more than one poller "
                "can: add shards."
            )
    return Plan(
        peak_per_minute=peak_per_minute,
        shards=shards,
        pollers=pollers,
        bucket_seconds=bucket_seconds,
        jobs_per_partition=jobs_per_partition,
        partition_drain_per_second=drain,
        per_poller_per_second=per_poller,
        active_pollers=active,
        warnings=warnings,
    )


def recommend(
    *,
    peak_per_minute: int,
    precision_seconds: float,
    poller_capacity_per_second: float,
    max_shards: int = 4096,
) -> Recommendation:
    """Recommend S, W and N for a peak rate and a precision target.

    Pollers: enough to carry the peak at HEADROOM of measured capacity.
    Shards: a power of two at least four times the pollers (room to scale out by
    adding pollers alone) and at least 16. Width: the widest standard width within
    the precision target (a bucket is only read once it opens, so a job may wait
    for the poll after its bucket opens, never for the bucket to end) that keeps
    partitions under LARGE_PARTITION_ROWS.
    """
    if peak_per_minute < 0 or precision_seconds <= 0 or poller_capacity_per_second <= 0:
        raise ValueError("peak >= 0, precision > 0 and capacity > 0 are required")
    per_second = peak_per_minute / 60
    pollers = max(1, math.ceil(per_second / (poller_capacity_per_second * HEADROOM)))
    shards = 16
    while shards < 4 * pollers and shards < max_shards:
        shards *= 2
    shards = min(shards, max_shards)
    reasons = [
        f"{pollers} poller(s) carry {per_second:,.0f} jobs/s at {HEADROOM:.0%} of the measured "
        f"{poller_capacity_per_second:,.0f} jobs/s each",
        f"{shards} shards leave room for {shards // max(pollers, 1)}x more pollers "
        "without a cutover",
    ]
    candidates = [w for w in STANDARD_WIDTHS_SECONDS if w <= max(precision_seconds, 1)]
    width = candidates[-1] if candidates else 1
    while width > 1 and per_second * width / shards > LARGE_PARTITION_ROWS:
        width = max(w for w in STANDARD_WIDTHS_SECONDS if w < width)
    reasons.append(
        f"{width} s buckets hold about {per_second * width / shards:,.0f} jobs per partition"
    )
    return Recommendation(shards=shards, bucket_seconds=width, pollers=pollers, reasons=reasons)
