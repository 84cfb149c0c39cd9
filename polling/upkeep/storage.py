"""Storage upkeep a poller runs between batches: partitions ahead and retention.

Partitions ahead every SENDLATER_PARTITION_CHECK_SECONDS; retention every
SENDLATER_PRUNE_SECONDS (one poller at a time, under an advisory lock); the schedule
ledger of the poller's own shards every SENDLATER_SCHEDULE_LEDGER_PRUNE_SECONDS
(``polling.upkeep.ledger_prune``, a slice at a time). A failure is logged and retried next
period; it never costs the poller a lease.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from datetime import datetime

from polling.upkeep.ledger_prune import ledger_prune
from scheduling import conf as scheduling_conf
from scheduling.storage.partitions import partitions_ensure_step
from scheduling.storage.retention import retention_prune

logger = logging.getLogger(__name__)

# Partitions ahead are created a few per iteration, within a slice of the lease, so
# a fresh database (~400 missing) never holds the loop long enough to lose a lease.
PARTITIONS_PER_ITERATION = 8
PARTITION_BUDGET_MAX_SECONDS = 0.5


class StorageUpkeep:
    """When partitions and retention are next due, on the monotonic clock."""

    def __init__(self, *, owner: str, lease_seconds: float, poll_interval: float) -> None:
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self._next_partition_check = 0.0
        self._next_prune = 0.0
        self._next_ledger_prune = 0.0
        self._ledger_after: uuid.UUID | None = None  # where the last slice stopped

    def run(self, now: datetime, *, shards: Sequence[int] = ()) -> None:
        """Do what is due at database time ``now`` (``shards``: the poller's own).

        Partitions are created nearest first, a few per call within a tenth of the
        lease (each in its own short transaction that gives way to locks); while
        some are still missing the next call comes after a poll interval, so the
        poller renews its leases and claims its shards in between.
        """
        mono = time.monotonic()
        every = scheduling_conf.partition_check_seconds()
        if every > 0 and mono >= self._next_partition_check:
            self._next_partition_check = mono + every
            if self._partitions_ahead(now):
                self._next_partition_check = mono + self.poll_interval
        every = scheduling_conf.prune_seconds()
        if every > 0 and mono >= self._next_prune:
            self._next_prune = mono + every
            self._prune(now)
        every = scheduling_conf.schedule_ledger_prune_seconds()
        if every > 0 and shards and mono >= self._next_ledger_prune:
            self._prune_ledger(shards)
            # A slice left some: the next one after a poll interval, else next period.
            wait = self.poll_interval if self._ledger_after is not None else every
            self._next_ledger_prune = mono + wait

    def _prune_ledger(self, shards: Sequence[int]) -> None:
        try:
            report = ledger_prune(shards=shards, after=self._ledger_after)
        except Exception:
            logger.exception("poller %s: schedule ledger retention failed", self.owner)
            self._ledger_after = None
            return
        self._ledger_after = report.resume_after
        if report.deleted:
            logger.info(
                "poller %s: schedule ledger: %s rows pruned (%s schedules)",
                self.owner,
                report.deleted,
                report.schedules,
            )

    def _partitions_ahead(self, now: datetime) -> int:
        """Create some missing partitions; return how many are still missing."""
        try:
            report = partitions_ensure_step(
                now=now,
                max_count=PARTITIONS_PER_ITERATION,
                budget_seconds=min(PARTITION_BUDGET_MAX_SECONDS, self.lease_seconds / 10),
            )
        except Exception:
            logger.exception("poller %s: could not create partitions ahead", self.owner)
            return 0
        if report.created:
            logger.info(
                "poller %s: created partitions %s (%s still missing)",
                self.owner,
                [name for name, _moved in report.created],
                report.remaining,
            )
        return report.remaining

    def _prune(self, now: datetime) -> None:
        try:
            report = retention_prune(now=now)
        except Exception:
            logger.exception("poller %s: retention failed", self.owner)
        else:
            if report.dropped or report.deleted:
                logger.info("poller %s: retention %s", self.owner, report)
