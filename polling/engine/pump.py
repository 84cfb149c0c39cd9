"""The pipeline between reads: send jobs at their rate slot, take outcomes, write back
groups, settle; the leases are renewed while it waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime

from polling.engine.pipeline import Pipeline
from polling.ownership.keeper import LeaseKeeper

WAIT_SLICE_SECONDS = 0.05  # longest wait for outcomes before the loop looks around again


class Pump:
    """Drives one poller's ``Pipeline`` between its reads (and while it waits or stops)."""

    def __init__(
        self,
        *,
        pipeline: Pipeline,
        keeper: LeaseKeeper,
        now: Callable[[], datetime],
        stopping: threading.Event,
        batch_size: int,
    ) -> None:
        self.pipeline = pipeline
        self.keeper = keeper
        self._now = now
        self.stopping = stopping
        self.batch_size = batch_size

    def room_for_a_batch(self) -> bool:
        """Wait (writing back as outcomes arrive) until the window has room for a batch."""
        need = min(self.batch_size, self.pipeline.window)
        while self.pipeline.room() < need:
            if self.stopping.is_set():
                return False
            self.pump(wait=WAIT_SLICE_SECONDS)
        return True

    def pump(self, wait: float = 0.0) -> None:
        """Send the jobs whose rate slot has come, take arrived outcomes (waiting up to
        ``wait`` s) and write back a due group."""
        now = self._now()
        self.pipeline.send_due(now)
        self.hosts_refresh()
        until_write = self.pipeline.seconds_to_write()
        if until_write is not None:
            wait = min(wait, until_write)
        until_send = self.pipeline.seconds_to_send(now)
        if until_send is not None:
            wait = min(wait, until_send)
        self.pipeline.collect(timeout=wait)
        self.pipeline.send_parked(self._now())
        if self.pipeline.write_due():
            self.write_back()
        else:
            self.keeper.renew_if_due(self._now())

    def hosts_refresh(self) -> None:
        """Take this poller's shares of its hosts' budgets when due (``HostLanes``)."""
        hosts = self.pipeline.hosts
        if hosts.refresh_due():
            hosts.refresh(self._now())
            self.pipeline.send_parked(self._now())

    def write_back(self) -> None:
        # A slow delivery must not let the lease lapse before its write.
        self.keeper.renew_if_due(self._now())
        now = self._now()
        self.keeper.lose(self.pipeline.write_back(now, held=self.keeper.readable()))

    def settle(self, deadline: float | None = None) -> None:
        """Wait for every job in flight and write all of it back (up to ``deadline``)."""
        while self.pipeline.in_flight:
            if deadline is not None and time.monotonic() >= deadline:
                return
            now = self._now()
            self.pipeline.send_due(now)
            self.hosts_refresh()
            until_send = self.pipeline.seconds_to_send(now)
            wait = WAIT_SLICE_SECONDS if until_send is None else min(WAIT_SLICE_SECONDS, until_send)
            self.pipeline.collect(timeout=max(wait, 0.001))
            self.pipeline.send_parked(self._now())
            self.pipeline.release_held()  # a breaker's cool-down is not waited out
            if self.pipeline.all_answered or self.pipeline.write_due():
                self.write_back()
            else:
                self.keeper.renew_if_due(self._now())
