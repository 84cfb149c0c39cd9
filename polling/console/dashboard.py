"""The lag dashboard's figures: per-shard rows, a summary and two time series.

Every figure comes from a fixed handful of grouped queries whatever the shard
count (leases, checkpoints, pollers, due backlog by bucket and shard, deliveries
by minute, deliveries by shard): never one query per shard.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Q
from django.db.models.functions import TruncMinute

from polling.models import Poller, PollerState, ShardCheckpoint, ShardLease
from polling.reading.held_backlog import HeldGroup, HeldKey, backlog_split, held_backlog
from polling.reading.lag import ShardLag, due_backlog_rows, shard_figures
from scheduling import conf as scheduling_conf
from scheduling import keys
from scheduling.jobs.inflight import in_flight_by_shard
from scheduling.models import Job, JobStatus

SERIES_MINUTES = 30  # the time series covers the last half hour
MINUTE = timedelta(minutes=1)

SORT_KEYS = {
    "shard": lambda r: r.shard,
    "owner": lambda r: (r.owner or "", r.shard),
    "epoch": lambda r: r.epoch,
    "checkpoint": lambda r: (r.checkpoint is not None, r.checkpoint or keys.EPOCH),
    "lag": lambda r: r.lag_seconds,
    "backlog": lambda r: r.due_backlog,
    "oldest": lambda r: r.oldest_due_age_seconds or 0.0,
    "delivered": lambda r: r.delivered_last_minute,
    "in_flight": lambda r: r.in_flight,
    "held": lambda r: r.held,
}


@dataclass(frozen=True)
class ShardRow(ShardLag):
    """The lag command's figures for one shard, plus what the console shows or acts on."""

    lease_id: int
    delivered_last_minute: int
    over_threshold: bool
    raw_owner: str | None  # the owner column as stored (for a fenced release)


@dataclass(frozen=True)
class Summary:
    total_backlog: int
    worst_lag_seconds: float
    worst_shard: int | None
    shards: int
    shards_unowned: int
    shards_over_threshold: int
    pollers_alive: int
    pollers_total: int
    delivered_last_minute: int
    total_held: int  # due jobs held by flow control (not in the backlog or the lag)
    held_keys: int


@dataclass(frozen=True)
class Series:
    minutes: list[datetime]
    delivered: list[int]
    backlog: list[int]


@dataclass(frozen=True)
class Dashboard:
    now: datetime
    threshold_seconds: float
    rows: list[ShardRow]
    summary: Summary
    series: Series
    warnings: list[str] = field(default_factory=list)
    held_keys: list[HeldKey] = field(default_factory=list)  # most held first


def _backlog_rows(now: datetime, start: datetime) -> tuple[list[dict], tuple[datetime, datetime]]:
    """Due pending rows grouped by ``(bucket, shard)``, buckets before ``start`` folded
    into one: a single pass over the pending index serves both the per-shard figures
    and the backlog history (its leading columns are exactly what is grouped).
    """
    width = scheduling_conf.bucket_seconds()
    first = keys.bucket_of(start, width)
    fold = (first, first - timedelta(seconds=width))
    return due_backlog_rows(now, fold=fold), fold


def _less_held(rows: list[dict], held: list[HeldGroup], fold: tuple[datetime, datetime]) -> None:
    """Take the held jobs out of ``rows``' depths (the history shows what could go)."""
    counts: dict[tuple[datetime, int], int] = defaultdict(int)
    for group in held:
        counts[(fold[1] if group.bucket < fold[0] else group.bucket, group.shard)] += group.jobs
    for row in rows:
        row["depth"] = max(0, row["depth"] - counts.get((row["b"], row["shard"]), 0))


def _series(now: datetime, start: datetime, backlog_rows: list[dict], total: int) -> Series:
    """Delivered per minute and due backlog at each minute's end, last 30 minutes.

    The backlog at ``t`` is rebuilt from today's rows: jobs pending now whose bucket
    began by ``t``, plus jobs delivered after ``t`` that were due by ``t``. (A job
    retried or written late since sits in a later bucket, so the history is a close
    approximation, not a recording.)
    """
    minutes = [start + i * MINUTE for i in range(SERIES_MINUTES)]
    pending_by_minute: dict[datetime, int] = defaultdict(int)
    for row in backlog_rows:
        if row["b"] >= start:
            pending_by_minute[row["b"].replace(second=0, microsecond=0)] += row["depth"]
    delivered_pairs = list(
        Job.objects.filter(status=JobStatus.DELIVERED, delivered_at__gte=start)
        .annotate(due_minute=TruncMinute("due_at"), done_minute=TruncMinute("delivered_at"))
        .values("due_minute", "done_minute")
        .annotate(n=Count("*"))
    )
    delivered: dict[datetime, int] = defaultdict(int)
    for row in delivered_pairs:
        delivered[row["done_minute"]] += row["n"]
    backlog: list[int] = []
    for minute in minutes:
        t = minute + MINUTE  # the minute's end
        due_later = sum(n for m, n in pending_by_minute.items() if m >= t)
        in_flight = sum(
            row["n"] for row in delivered_pairs if row["due_minute"] < t <= row["done_minute"]
        )
        backlog.append(max(0, total - due_later) + in_flight)
    return Series(minutes=minutes, delivered=[delivered[m] for m in minutes], backlog=backlog)


def dashboard_build(*, now: datetime, threshold_seconds: float, sort: str = "shard") -> Dashboard:
    """Everything the lag dashboard shows, as of database time ``now``."""
    lease_seconds = scheduling_conf.lease_seconds()
    width = scheduling_conf.bucket_seconds()
    leases = list(
        ShardLease.objects.order_by("shard").values_list(
            "id", "shard", "owner", "epoch", "expires_at", "pinned_to"
        )
    )
    checkpoints = dict(ShardCheckpoint.objects.values_list("shard", "last_drained"))
    start = now.replace(second=0, microsecond=0) - (SERIES_MINUTES - 1) * MINUTE
    backlog_rows, fold = _backlog_rows(now, start)
    held = held_backlog(now=now, open_bucket=keys.bucket_of(now, width))
    backlog = backlog_split(
        ((r["b"], r["shard"], r["depth"], r["oldest"]) for r in backlog_rows),
        held.groups,
        fold=fold,
    )
    _less_held(backlog_rows, held.groups, fold)
    delivered_now = dict(
        Job.objects.filter(status=JobStatus.DELIVERED, delivered_at__gte=now - MINUTE)
        .values("shard")
        .annotate(n=Count("*"))
        .values_list("shard", "n")
    )
    pollers = Poller.objects.aggregate(
        total=Count("id"),
        alive=Count(
            "id",
            filter=Q(
                state=PollerState.ACTIVE,
                heartbeat_at__gt=now - timedelta(seconds=lease_seconds),
            ),
        ),
    )
    in_flight = in_flight_by_shard()
    rows: list[ShardRow] = []
    for lease_id, shard, owner, epoch, expires_at, pinned_to in leases:
        # The selector's figures, not shard_lag_list itself: the one backlog pass
        # above also feeds the series, and the console needs the lease ids.
        figures = shard_figures(
            backlog.get(shard), checkpoints.get(shard), in_flight.get(shard, 0), now, width
        )
        rows.append(
            ShardRow(
                shard=shard,
                lease_id=lease_id,
                owner=owner if owner and expires_at and expires_at > now else None,
                epoch=epoch,
                expires_at=expires_at,
                pinned_to=pinned_to,
                checkpoint=checkpoints.get(shard),
                in_flight=in_flight.get(shard, 0),
                over_threshold=figures["lag_seconds"] > threshold_seconds,
                **figures,
                delivered_last_minute=delivered_now.get(shard, 0),
                raw_owner=owner,
            )
        )
    total = sum(r.due_backlog for r in rows)
    worst = max(rows, key=lambda r: r.lag_seconds, default=None)
    summary = Summary(
        total_backlog=total,
        worst_lag_seconds=worst.lag_seconds if worst else 0.0,
        worst_shard=worst.shard if worst and worst.lag_seconds > 0 else None,
        shards=len(rows),
        shards_unowned=sum(1 for r in rows if r.owner is None),
        shards_over_threshold=sum(1 for r in rows if r.over_threshold),
        pollers_alive=pollers["alive"],
        pollers_total=pollers["total"],
        delivered_last_minute=sum(delivered_now.values()),
        total_held=sum(k.jobs for k in held.keys),
        held_keys=len(held.keys),
    )
    key = sort.removeprefix("-")
    rows.sort(key=SORT_KEYS.get(key, SORT_KEYS["shard"]), reverse=sort.startswith("-"))
    warnings: list[str] = []
    if rows and summary.pollers_alive == 0:
        warnings.append("No poller is alive: nothing is being delivered.")
    elif summary.pollers_alive > len(rows) > 0:
        warnings.append(
            f"{summary.pollers_alive} live pollers for {len(rows)} shards: "
            f"{summary.pollers_alive - len(rows)} are standbys."
        )
    return Dashboard(
        now=now,
        threshold_seconds=threshold_seconds,
        rows=rows,
        summary=summary,
        series=_series(now, start, backlog_rows, total),
        warnings=warnings,
        held_keys=held.keys,
    )
