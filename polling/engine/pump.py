"""The poller's side of the pipeline between reads: send jobs at their rate slot, take
outcomes, write back groups, settle (a mixin of ``polling.engine.poller.Poller``)."""

from __future__ import annotations

import time

from polling import metrics

WAIT_SLICE_SECONDS = 0.05  # longest wait for outcomes before the loop looks around again


class PipelineStages:
    """Between reads: the poller's attributes (``pipeline``, ``leases``, ...) are used."""

    def _room_for_a_batch(self) -> bool:
        """Wait (writing back as outcomes arrive) until the window has room for a batch."""
        need = min(self.batch_size, self.pipeline.window)
        while self.pipeline.room() < need:
            if self.stopping.is_set():
                return False
            self._pump(wait=WAIT_SLICE_SECONDS)
        return True

    def _pump(self, wait: float = 0.0) -> None:
        """Send the jobs whose rate slot has come, take arrived outcomes (waiting up to
        ``wait`` s) and write back a due group."""
        now = self._now()
        self.pipeline.send_due(now)
        until_write = self.pipeline.seconds_to_write()
        if until_write is not None:
            wait = min(wait, until_write)
        until_send = self.pipeline.seconds_to_send(now)
        if until_send is not None:
            wait = min(wait, until_send)
        self.pipeline.collect(timeout=wait)
        if self.pipeline.write_due():
            self._write_back()
        else:
            self._renew_if_due()

    def _write_back(self) -> None:
        self._renew_if_due()  # a slow delivery must not let the lease lapse before its write
        lost = self.pipeline.write_back(self._now())
        if lost:
            metrics.LEASES_LOST.inc(len(lost))
            for shard in lost:
                self.leases.pop(shard, None)

    def _settle(self, deadline: float | None = None) -> None:
        """Wait for every job in flight and write all of it back (up to ``deadline``)."""
        while self.pipeline.in_flight:
            if deadline is not None and time.monotonic() >= deadline:
                return
            now = self._now()
            self.pipeline.send_due(now)
            until_send = self.pipeline.seconds_to_send(now)
            wait = WAIT_SLICE_SECONDS if until_send is None else min(WAIT_SLICE_SECONDS, until_send)
            self.pipeline.collect(timeout=max(wait, 0.001))
            if self.pipeline.all_answered or self.pipeline.write_due():
                self._write_back()
            else:
                self._renew_if_due()
