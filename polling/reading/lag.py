"""Per-shard lag, for the lag command, the console and /metrics: no locks, no writes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Case, Count, DateTimeField, F, Min, Value, When
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from polling.models import ShardCheckpoint, ShardLease
from polling.reading.held_backlog import HeldKey, ShardBacklog, backlog_split, held_backlog
from scheduling import conf as scheduling_conf
from scheduling import keys
from scheduling.jobs.inflight import in_flight_by_shard
from scheduling.models import Job, JobStatus
from scheduling.sharding.clock import db_now

FOLD_MINUTES = 30  # older due buckets are one group per shard in the backlog read


@dataclass(frozen=True)
class ShardLag:
    shard: int
    owner: str | None  # None when the lease is free or expired
    epoch: int
    expires_at: datetime | None
    pinned_to: str | None
    checkpoint: datetime | None
    lag_seconds: float
    due_backlog: int  # due pending jobs not in flight and not held by flow control
    oldest_due_age_seconds: float | None  # of those the service could send now
    in_flight: int  # jobs read by the owner and not yet written back (its window)
    held: int  # due pending jobs held by flow control (polling.reading.held_backlog)
    held_oldest_age_seconds: float | None


@dataclass(frozen=True)
class LagReport:
    rows: list[ShardLag]
    held_keys: list[HeldKey]  # the keys holding due jobs back, most held first


def shard_lag_seconds(
    *,
    depth: int,
    checkpoint: datetime | None,
    oldest: datetime | None,
    now: datetime,
    width_seconds: int,
    not_before: datetime | None = None,
) -> float:
    """``now - (checkpoint + W)`` while due jobs wait (``depth``); 0 when none do.

    A shard never drained yet counts from its oldest due job instead. ``not_before``:
    the earliest bucket holding a job that could go now, when jobs held by flow
    control keep the checkpoint back (their wait is not the pollers' lag).
    """
    if not depth:
        return 0.0
    start = checkpoint + timedelta(seconds=width_seconds) if checkpoint else oldest
    if start is not None and not_before is not None:
        start = max(start, not_before)
    return max(0.0, (now - start).total_seconds()) if start else 0.0


def due_backlog_rows(now: datetime, *, fold: tuple[datetime, datetime] | None) -> list[dict]:
    """Due pending rows (in buckets up to the open one) grouped by shard, with their
    count and oldest ``due_at``: one pass over the pending index.

    ``fold``: ``(first, into)``: grouped by ``(b, shard)`` as well, ``b`` the bucket,
    those before ``first`` folded into ``into`` (the leading columns of the index are
    what is grouped, and a week of backlog is still one group per shard, not one
    per minute). Bucket bound first, and ``COUNT(*)``: an index-only scan.
    """
    open_bucket = keys.bucket_of(now, scheduling_conf.bucket_seconds())
    due = Job.objects.filter(status=JobStatus.PENDING, bucket__lte=open_bucket, due_at__lte=now)
    if fold is None:
        return list(due.values("shard").annotate(depth=Count("*"), oldest=Min("due_at")))
    folded = Case(
        When(bucket__lt=fold[0], then=Value(fold[1])),
        default=F("bucket"),
        output_field=DateTimeField(),
    )
    return list(
        due.annotate(b=folded).values("b", "shard").annotate(depth=Count("*"), oldest=Min("due_at"))
    )


def shard_lag_list(*, now: datetime) -> list[ShardLag]:
    """Per shard: owner, epoch, checkpoint, lag, due backlog, oldest due job age, in
    flight and held (``shard_lag_report``)."""
    return shard_lag_report(now=now).rows


def shard_lag_report(*, now: datetime) -> LagReport:
    """Per shard: owner, epoch, checkpoint, lag, due backlog, oldest due job age, in
    flight and held; and the flow-control keys holding due jobs back.

    Lag is ``now - (checkpoint + W)`` while due jobs the service could send wait (0
    when none do). The backlog is one grouped query over pending rows in buckets up
    to the open one, so it reads the backlog's own index range, never the future.
    Jobs held by flow control (a paused key, a key at its limit) are counted apart
    (``polling.reading.held_backlog``) and left out of lag, backlog and oldest age. Jobs in
    flight are still pending rows: they come from the shards' in-flight batches and
    are left out of the backlog.
    """
    width = scheduling_conf.bucket_seconds()
    open_bucket = keys.bucket_of(now, width)
    held = held_backlog(now=now, open_bucket=open_bucket)
    fold = None
    if held.groups:  # by bucket too, to tell held jobs from the rest
        first = open_bucket - timedelta(minutes=FOLD_MINUTES)
        fold = (first, first - timedelta(seconds=width))
    rows = due_backlog_rows(now, fold=fold)
    backlog = backlog_split(
        ((r.get("b"), r["shard"], r["depth"], r["oldest"]) for r in rows), held.groups, fold=fold
    )
    checkpoints = dict(ShardCheckpoint.objects.values_list("shard", "last_drained"))
    in_flight = in_flight_by_shard()
    result: list[ShardLag] = []
    for lease in ShardLease.objects.order_by("shard"):
        row = backlog.get(lease.shard)
        checkpoint = checkpoints.get(lease.shard)
        result.append(
            ShardLag(
                shard=lease.shard,
                owner=lease.owner if lease.expires_at and lease.expires_at > now else None,
                epoch=lease.epoch,
                expires_at=lease.expires_at,
                pinned_to=lease.pinned_to,
                checkpoint=checkpoint,
                in_flight=in_flight.get(lease.shard, 0),
                **shard_figures(row, checkpoint, in_flight.get(lease.shard, 0), now, width),
            )
        )
    return LagReport(result, held.keys)


def shard_figures(
    row: ShardBacklog | None,
    checkpoint: datetime | None,
    in_flight: int,
    now: datetime,
    width_seconds: int,
) -> dict[str, Any]:
    """A shard's lag, due backlog, oldest due age and held figures from its split
    backlog (the lag command, ``/metrics`` and the dashboard alike)."""
    row = row or ShardBacklog()
    lag = shard_lag_seconds(
        depth=row.depth,
        checkpoint=checkpoint,
        oldest=row.oldest,
        now=now,
        width_seconds=width_seconds,
        not_before=row.first_bucket if row.held else None,
    )
    return {
        "lag_seconds": lag,
        # Jobs in flight of a held key are counted in both: never below zero.
        "due_backlog": max(0, row.depth - in_flight),
        "oldest_due_age_seconds": (now - row.oldest).total_seconds() if row.oldest else None,
        "held": row.held,
        "held_oldest_age_seconds": (
            (now - row.held_oldest).total_seconds() if row.held_oldest else None
        ),
    }


class ShardLagCollector(Collector):
    """Per-shard lag, due backlog, oldest due age, jobs in flight and jobs held by flow
    control, read when scraped (lag, backlog and oldest age leave the held out)."""

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Registration asks for the names; answering from collect() would query the
        # database at import time (before migrations, or with no database at all).
        return iter(self._families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag, backlog, oldest, in_flight, held, held_oldest = self._families()
        for row in shard_lag_list(now=db_now()):
            label = [str(row.shard)]
            lag.add_metric(label, row.lag_seconds)
            backlog.add_metric(label, row.due_backlog)
            oldest.add_metric(label, row.oldest_due_age_seconds or 0.0)
            in_flight.add_metric(label, row.in_flight)
            held.add_metric(label, row.held)
            held_oldest.add_metric(label, row.held_oldest_age_seconds or 0.0)
        yield from (lag, backlog, oldest, in_flight, held, held_oldest)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        lag = GaugeMetricFamily(
            "sendlater_shard_lag_seconds",
            "now - (checkpoint + W) while due jobs the service could send wait, per shard "
            "(jobs held by flow control left out).",
            labels=["shard"],
        )
        backlog = GaugeMetricFamily(
            "sendlater_shard_due_backlog",
            "Pending jobs already due, not in flight and not held by flow control, per shard.",
            labels=["shard"],
        )
        oldest = GaugeMetricFamily(
            "sendlater_shard_oldest_due_age_seconds",
            "Age of the oldest due pending job not held by flow control, per shard (0 when none).",
            labels=["shard"],
        )
        in_flight = GaugeMetricFamily(
            "sendlater_shard_in_flight_jobs",
            "Jobs read by the shard's owner and not yet written back, per shard.",
            labels=["shard"],
        )
        held = GaugeMetricFamily(
            "sendlater_shard_held_jobs",
            "Due pending jobs held by flow control (a paused key, a key at its rate or "
            "parallelism limit), per shard; per key: sendlater_flow_waiting_jobs.",
            labels=["shard"],
        )
        held_oldest = GaugeMetricFamily(
            "sendlater_shard_held_oldest_age_seconds",
            "Age of the oldest due job held by flow control, per shard (0 when none).",
            labels=["shard"],
        )
        return lag, backlog, oldest, in_flight, held, held_oldest
