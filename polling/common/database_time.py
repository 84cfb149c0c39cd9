"""The database clock as a poller process sees it between two readings.

The poller reads the database's ``now`` once per loop iteration
(``scheduling.sharding.clock.db_now``) and anchors ``DB_TIME`` to it; ``DB_TIME.now()`` is
that reading plus the monotonic time elapsed since. Sinks stamp what a receiver
compares with its own clock from it (``webhook-timestamp``, which Standard Webhooks
receivers accept within ±5 minutes, and each attempt's ``started_at``), so a
poller whose machine clock is minutes off still signs timestamps receivers
accept. Durations are measured on the monotonic clock alone.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta


class DatabaseTime:
    """One per process (a ``runpoller`` runs one poller), like ``renewer.PROGRESS``."""

    def __init__(self) -> None:
        self._anchor: tuple[datetime, float] | None = None

    def anchor(self, reading: datetime, mono: float | None = None) -> None:
        """The database read ``reading`` at monotonic time ``mono`` (default: now)."""
        self._anchor = (reading, time.monotonic() if mono is None else mono)

    def reset(self) -> None:
        self._anchor = None

    def now(self) -> datetime:
        """The database's time now: the last reading plus the monotonic time since.

        Before any reading (a sink used outside a poller) there is nothing better
        than this machine's clock.
        """
        anchor = self._anchor  # one read: a poller thread may re-anchor meanwhile
        if anchor is None:
            return datetime.now(UTC)
        reading, mono = anchor
        return reading + timedelta(seconds=time.monotonic() - mono)


DB_TIME = DatabaseTime()
