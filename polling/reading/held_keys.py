"""A poller's reads of held flow-control keys (``polling.flow.gate`` keeps them out of
the shard reads): each key that may go again is read across the poller's shards."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from polling import metrics
from polling.ownership import leases as lease_sql
from polling.ownership.keeper import LeaseKeeper
from polling.ownership.stall_bounds import WindowBusy
from polling.reading import take
from polling.reading.shard_reads import ShardReader, Window

logger = logging.getLogger("polling.engine.poller")


class HeldKeyReader:
    """Reads the held keys whose next slot has come, into the dispatch window."""

    def __init__(
        self,
        *,
        name: str,
        keeper: LeaseKeeper,
        window: Window,
        shards: ShardReader,
        now: Callable[[], datetime],
        stopping: threading.Event,
        room_for_a_batch: Callable[[], bool],
        batch_size: int,
    ) -> None:
        self.name = name
        self.keeper = keeper
        self.window = window
        self.shards = shards  # the buckets a key's jobs may lie in (set by each pass)
        self._now = now
        self.stopping = stopping
        self._room_for_a_batch = room_for_a_batch
        self.batch_size = batch_size

    def read_due(self) -> int:
        """Read the held flow-control keys that may go again; return the jobs read."""
        gate, read = self.window.gate, 0
        for key, reason, limit in gate.due(self._now(), self.batch_size):
            if self.stopping.is_set() or not self.keeper.leases or not self._room_for_a_batch():
                return read
            self.keeper.renew_if_due(self._now())
            read += self._read_key(key, limit, expired_only=False)
            if reason == "paused" and gate.held_for(key) == "paused":
                read += self._read_key(key, limit, expired_only=True)  # expiry applies
        return read

    def _read_key(self, key: tuple[int, str], wanted: int, *, expired_only: bool) -> int:
        gate, now = self.window.gate, self._now()
        limit = min(wanted, self.window.room())
        flying = gate.flying(key)
        try:
            taken = take.flow_take(
                owner=self.name,
                leases=self.keeper.readable(),
                team_id=key[0],
                key=key[1],
                after_bucket=self.shards.after_bucket,
                open_bucket=self.shards.open_bucket,
                now=now,
                limit=limit,
                skip=flying,
                fetch=limit + len(flying),
                expired_only=expired_only,
                slots_until=now + timedelta(seconds=self.keeper.lease_seconds),
            )
        except lease_sql.LeaseLost as lost:
            logger.warning("poller %s: lease of shard %s lost before a read", self.name, lost.shard)
            self.keeper.lose([lost.shard] if lost.shard is not None else [])
            return 0
        except WindowBusy:
            metrics.WINDOWS_BUSY.inc()
            logger.warning(
                "poller %s: a window lock of key %s is held; read again on a later pass",
                self.name,
                key[1],
            )
            gate.again(key)
            return 0
        if taken:
            self.window.submit(taken, now, shard_read=False)
        if expired_only:
            return len(taken)
        gate.hold(taken.holds, now)
        if taken.drained:
            gate.let_go(key)
        elif not taken.holds:
            gate.again(key)  # it took all it asked for: more wait
        return len(taken)
