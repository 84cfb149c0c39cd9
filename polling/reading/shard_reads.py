"""A poller's reads of its shards: the frontier of each, checkpoints moved past closed
buckets, and due jobs read oldest bucket first into the dispatch window."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from polling import metrics
from polling.dispatch.base import ClaimedJob
from polling.flow.gate import FlowGate
from polling.flow.host_lanes import HostLanes
from polling.ownership import leases as lease_sql
from polling.ownership.keeper import LeaseKeeper
from polling.ownership.stall_bounds import WindowBusy
from polling.reading import checkpoints, take
from polling.reading.cursors import ReadCursors
from scheduling import keys
from scheduling.keys import EPOCH
from scheduling.sharding.clock import is_closed

logger = logging.getLogger("polling.engine.poller")


class Window(Protocol):
    """What a read hands its jobs to: the poller's dispatch window (``engine.Pipeline``)."""

    cursors: ReadCursors
    gate: FlowGate
    hosts: HostLanes

    def room(self) -> int: ...

    def submit(
        self, jobs: Sequence[ClaimedJob], now: datetime, *, shard_read: bool = True
    ) -> None: ...


class ShardReader:
    """Plans a pass over the poller's shards and reads each ``(bucket, shard)``.

    State kept between a pass's plan and its reads (the held-key reads use it too):
    ``after_bucket``, the least of the shards' checkpoints, and ``open_bucket``;
    ``next_due``, the earliest pending due time seen ahead of now.
    """

    def __init__(
        self,
        *,
        name: str,
        keeper: LeaseKeeper,
        window: Window,
        now: Callable[[], datetime],
        width: int,
    ) -> None:
        self.name = name
        self.keeper = keeper
        self.window = window
        self._now = now
        self.width = width
        self.after_bucket = EPOCH
        self.open_bucket = EPOCH
        self.next_due: datetime | None = None

    def plan(self, now: datetime) -> list[tuple[datetime, int]]:
        """Advance checkpoints past closed, drained buckets; return ``(bucket, shard)``
        pairs with jobs due now, oldest bucket first."""
        leases = self.keeper.leases
        open_bucket = keys.bucket_of(now, self.width)
        step = timedelta(seconds=self.width)
        last_closed = open_bucket - step if is_closed(open_bucket - step, now) else None
        last_closed = last_closed or open_bucket - 2 * step
        hosts = self.window.hosts
        if hosts.freed:  # a busy host has room again: its rows may lie behind the cursors
            hosts.freed = False
            self.window.cursors.rescan_all()
        fronts = checkpoints.frontier(
            shards=leases,
            open_bucket=open_bucket,
            held=self.window.gate.excluded(),
            hosts=hosts.excluded(),
        )
        self.after_bucket = min((f.checkpoint or EPOCH for f in fronts.values()), default=EPOCH)
        targets: dict[int, tuple[int, datetime]] = {}
        for shard, front in fronts.items():
            target = min(last_closed, front.bucket - step) if front.bucket else last_closed
            if shard in leases and (front.checkpoint is None or target > front.checkpoint):
                targets[shard] = (leases[shard], target)
        if targets:
            moved = checkpoints.checkpoint_advance(owner=self.name, targets=targets, now=now)
            if moved:
                logger.debug("poller %s: checkpoints advanced %s", self.name, moved)
        ahead = [f.next_due for f in fronts.values() if f.next_due and f.next_due > now]
        self.next_due = min(ahead, default=None)
        self.open_bucket = open_bucket
        # Oldest bucket first; skip shards whose first bucket holds nothing due yet.
        return sorted(
            (front.bucket, shard)
            for shard, front in fronts.items()
            if front.bucket and front.next_due and front.next_due <= now
        )

    def read(self, bucket: datetime, shard: int, limit: int) -> int:
        """Read up to ``limit`` due jobs of ``(bucket, shard)`` into the window.

        No row is claimed: the lease is the lock. The read starts past the jobs
        this poller already has in flight there (``polling.reading.cursors``) and
        records the batch in flight; a lease found lost is let go.
        """
        now = self._now()
        window = self.window
        read = window.cursors.plan(shard, bucket, limit)
        try:
            jobs = take.batch_take(
                owner=self.name,
                epoch=self.keeper.leases[shard],
                bucket=bucket,
                shard=shard,
                now=now,
                limit=limit,
                after=read.after,
                skip=read.skip,
                fetch=read.fetch,
                held=window.gate.excluded(),
                hosts=window.hosts.excluded(),
                slots_until=now + timedelta(seconds=self.keeper.lease_seconds),
            )
        except lease_sql.LeaseLost:
            logger.warning("poller %s: lease of shard %s lost before a read", self.name, shard)
            self.keeper.lose([shard])
            return 0
        except WindowBusy:
            metrics.WINDOWS_BUSY.inc()
            logger.warning(
                "poller %s: shard %s: its window lock is held (a stopped poller's?);"
                " read again on a later pass",
                self.name,
                shard,
            )
            return 0
        window.gate.hold(jobs.holds, now)
        if read.rescan_below is not None:
            window.cursors.rescanned(shard, bucket, read, jobs)
        if not jobs:
            return 0
        metrics.CLAIM_BATCH.observe(len(jobs))
        window.submit(jobs, now)
        logger.debug(
            "poller %s: shard %s bucket %s: %s read",
            self.name,
            shard,
            bucket,
            len(jobs),
            extra={"shard": shard, "bucket": bucket.isoformat(), "batch_size": len(jobs)},
        )
        return len(jobs)
