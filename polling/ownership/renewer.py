"""Keeps a poller's leases through a slow batch, and only while it makes progress.

The loop renews between batches and before each write-back; a batch whose
deliveries take longer than the lease (a slow receiver answering just inside the
timeout, 25 rows 8 at a time) would otherwise lose its lease mid-dispatch, see its
write-back fenced out, and be delivered again by the next owner, over and over.

``LeaseRenewer`` is a thread that renews (the same single fenced statement as the
loop) every lease/3 **only while a dispatch is under way and a delivery finished
within the stall limit**. A stuck process (a handler that never returns, a stall
between dispatch and write-back, SIGSTOP) renews nothing and loses its leases as
before; between batches the loop renews for itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.db import connection

from polling import conf
from polling.ownership import leases
from scheduling.sharding.clock import db_now
from scheduling.storage.failover import connection_discard

logger = logging.getLogger(__name__)


class DispatchProgress:
    """Whether a batch is being delivered, and when a delivery last finished.

    One per process (a ``runpoller`` runs one poller): sinks ``touch()`` it after
    each delivery, the loop wraps each dispatch in ``dispatching_batch()``.
    """

    def __init__(self) -> None:
        self.dispatching = False
        self._at = time.monotonic()

    @contextmanager
    def dispatching_batch(self) -> Iterator[None]:
        self._at = time.monotonic()
        self.dispatching = True
        try:
            yield
        finally:
            self.dispatching = False

    def touch(self) -> None:
        self._at = time.monotonic()

    def idle_seconds(self) -> float:
        return time.monotonic() - self._at


PROGRESS = DispatchProgress()


class LeaseRenewer:
    """A daemon thread renewing ``owner``'s leases while ``progress`` says it may."""

    def __init__(
        self,
        *,
        owner: str,
        lease_seconds: float,
        stall_seconds: float,
        progress: DispatchProgress = PROGRESS,
    ) -> None:
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.stall_seconds = stall_seconds
        self.progress = progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-renewer", daemon=True)

    @classmethod
    def started(cls, *, owner: str, lease_seconds: float) -> LeaseRenewer:
        """A running renewer with the stall limit the settings give."""
        renewer = cls(
            owner=owner,
            lease_seconds=lease_seconds,
            stall_seconds=conf.dispatch_stall_seconds(),
        )
        renewer.start()
        return renewer

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.lease_seconds)

    def renew_if_progressing(self) -> dict[int, int] | None:
        """Renew now if a dispatch is under way and not stalled; the leases held, or None."""
        if not self.progress.dispatching or self.progress.idle_seconds() > self.stall_seconds:
            return None
        now = db_now()
        until = now + timedelta(seconds=self.lease_seconds)
        return leases.lease_renew(owner=self.owner, now=now, until=until)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.lease_seconds / 3):
                try:
                    held = self.renew_if_progressing()
                except Exception:
                    logger.exception("poller %s: background lease renewal failed", self.owner)
                    connection_discard()  # broken or read-only: never reuse it
                    continue
                if held is not None:
                    logger.debug("poller %s: renewed %s leases mid-batch", self.owner, len(held))
        finally:
            connection.close()  # this thread's own database connection
