"""Per-shard lag, for the lag command, the console and /metrics: no locks, no writes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Min
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from polling.models import ShardCheckpoint, ShardLease
from scheduling import conf as scheduling_conf
from scheduling import keys
from scheduling.jobs.inflight import in_flight_by_shard
from scheduling.models import Job, JobStatus
from scheduling.sharding.clock import db_now


@dataclass(frozen=True)
class ShardLag:
    shard: int
    owner: str | None  # None when the lease is free or expired
    epoch: int
    expires_at: datetime | None
    pinned_to: str | None
    checkpoint: datetime | None
    lag_seconds: float
    due_backlog: int  # due pending jobs not in flight
    oldest_due_age_seconds: float | None
    in_flight: int  # jobs read by the owner and not yet written back (its window)


def shard_lag_seconds(
    *,
    depth: int,
    checkpoint: datetime | None,
    oldest: datetime | None,
    now: datetime,
    width_seconds: int,
) -> float:
    """``now - (checkpoint + W)`` while due jobs wait (``depth``); 0 when none do.

    A shard never drained yet counts from its oldest due job instead.
    """
    if not depth:
        return 0.0
    start = checkpoint + timedelta(seconds=width_seconds) if checkpoint else oldest
    return max(0.0, (now - start).total_seconds()) if start else 0.0


def shard_lag_list(*, now: datetime) -> list[ShardLag]:
    """Per shard: owner, epoch, checkpoint, lag, due backlog, oldest due job age, in flight.

    Lag is ``now - (checkpoint + W)`` while due jobs wait (0 when none do). The
    backlog is one grouped query over pending rows in buckets up to the open one,
    so it reads the backlog's own index range, never the future. Jobs in flight are
    still pending rows: they come from the shards' in-flight batches and are left
    out of the backlog.
    """
    width = scheduling_conf.bucket_seconds()
    open_bucket = keys.bucket_of(now, width)
    backlog = {
        row["shard"]: row
        for row in Job.objects.filter(
            status=JobStatus.PENDING, bucket__lte=open_bucket, due_at__lte=now
        )
        .values("shard")
        .annotate(depth=Count("id"), oldest=Min("due_at"))
    }
    checkpoints = dict(ShardCheckpoint.objects.values_list("shard", "last_drained"))
    in_flight = in_flight_by_shard()
    result: list[ShardLag] = []
    for lease in ShardLease.objects.order_by("shard"):
        row = backlog.get(lease.shard)
        checkpoint = checkpoints.get(lease.shard)
        depth = row["depth"] if row else 0
        lag = shard_lag_seconds(
            depth=depth,
            checkpoint=checkpoint,
            oldest=row["oldest"] if row else None,
            now=now,
            width_seconds=width,
        )
        result.append(
            ShardLag(
                shard=lease.shard,
                owner=lease.owner if lease.expires_at and lease.expires_at > now else None,
                epoch=lease.epoch,
                expires_at=lease.expires_at,
                pinned_to=lease.pinned_to,
                checkpoint=checkpoint,
                lag_seconds=lag,
                due_backlog=max(0, depth - in_flight.get(lease.shard, 0)),
                oldest_due_age_seconds=(now - row["oldest"]).total_seconds() if row else None,
                in_flight=in_flight.get(lease.shard, 0),
            )
        )
    return result


class ShardLagCollector(Collector):
    """Per-shard lag, due backlog, oldest due age and jobs in flight, read when scraped."""

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Registration asks for the names; answering from collect() would query the
        # database at import time (before migrations, or with no database at all).
        return iter(self._families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag, backlog, oldest, in_flight = self._families()
        for row in shard_lag_list(now=db_now()):
            label = [str(row.shard)]
            lag.add_metric(label, row.lag_seconds)
            backlog.add_metric(label, row.due_backlog)
            oldest.add_metric(label, row.oldest_due_age_seconds or 0.0)
            in_flight.add_metric(label, row.in_flight)
        yield lag
        yield backlog
        yield oldest
        yield in_flight

    @staticmethod
    def _families() -> tuple[
        GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily
    ]:
        lag = GaugeMetricFamily(
            "sendlater_shard_lag_seconds",
            "now - (checkpoint + W) while due jobs wait, per shard.",
            labels=["shard"],
        )
        backlog = GaugeMetricFamily(
            "sendlater_shard_due_backlog",
            "Pending jobs already due and not in flight, per shard.",
            labels=["shard"],
        )
        oldest = GaugeMetricFamily(
            "sendlater_shard_oldest_due_age_seconds",
            "Age of the oldest due pending job, per shard (0 when none).",
            labels=["shard"],
        )
        in_flight = GaugeMetricFamily(
            "sendlater_shard_in_flight_jobs",
            "Jobs read by the shard's owner and not yet written back, per shard.",
            labels=["shard"],
        )
        return lag, backlog, oldest, in_flight
