"""Shard-count cutovers: change S for buckets from a future instant on.

Split from ``scheduling.jobs.services`` (which re-exports both functions) to keep
modules small; the rules are in docs/keys.md.
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction

from scheduling import conf, keys
from scheduling.errors import InvalidCutover
from scheduling.models import ShardCountSchedule
from scheduling.sharding.clock import db_now, open_bucket


def cutover_earliest(now: datetime) -> datetime:
    """The first bucket a cutover may start at: after the open bucket plus the margin."""
    width = conf.bucket_seconds()
    earliest = keys.bucket_end(open_bucket(now), width) + conf.cutover_margin()
    aligned = keys.bucket_of(earliest, width)
    return aligned if aligned == earliest else keys.bucket_end(aligned, width)


def cutover_schedule(
    *,
    shard_count: int,
    effective_from: datetime,
    reason: str = "",
    now: datetime | None = None,
) -> ShardCountSchedule:
    """Record that buckets from ``effective_from`` on get ``shard_count`` shards.

    Buckets already recorded at or after ``effective_from`` keep their count: a
    bucket's count never changes once jobs are written into it.
    """
    now = now or db_now()
    if effective_from.tzinfo is None or effective_from.tzinfo.utcoffset(effective_from) is None:
        raise InvalidCutover("effective_from must carry a UTC offset.", field="effective_from")
    width = conf.bucket_seconds()
    if not keys.is_bucket_start(effective_from, width):
        raise InvalidCutover(
            f"effective_from must be a bucket boundary (a multiple of {width} s); "
            f"the next one is {keys.bucket_end(keys.bucket_of(effective_from, width), width)}.",
            field="effective_from",
        )
    earliest = cutover_earliest(now)
    if effective_from < earliest:
        raise InvalidCutover(
            f"effective_from must be at or after {earliest.isoformat()} "
            "(the open bucket plus SENDLATER_CUTOVER_MARGIN_SECONDS).",
            field="effective_from",
        )
    ceiling = conf.max_shards()
    if isinstance(shard_count, bool) or not isinstance(shard_count, int):
        raise InvalidCutover("shard_count must be a whole number.", field="shard_count")
    if not 1 <= shard_count <= ceiling:
        raise InvalidCutover(
            f"shard_count must lie between 1 and {ceiling} (SENDLATER_MAX_SHARDS).",
            field="shard_count",
        )
    try:
        with transaction.atomic():
            return ShardCountSchedule.objects.create(
                effective_from=effective_from, shard_count=shard_count, reason=reason
            )
    except IntegrityError as error:
        raise InvalidCutover(
            f"a cutover already starts at {effective_from.isoformat()}.", field="effective_from"
        ) from error
