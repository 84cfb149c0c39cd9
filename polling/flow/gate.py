"""One poller's flow-control keys held back (``polling.flow.admission`` decides; this remembers).

When a read finds a key over its limits (or paused), the key's jobs stay pending and
the key is *held*: the poller's shard reads leave its rows out (``held_filter``), so
a key's backlog never stands in front of other jobs of the same shards, and a held
key is read on its own (``take.flow_take``) when it may go again: at its next rate
slot, when one of its slots comes back, or every ``PAUSED_RECHECK_SECONDS`` while
paused. A key read that finds nothing more waiting lets the key go: its next jobs
come with the shard reads again.

The gate also knows the key's jobs this poller has in flight (still pending rows),
so a key read passes over them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from polling import metrics
from polling.common.sql import held_key
from polling.dispatch.base import ClaimedJob
from polling.flow.admission import FlowKey, Hold

PAUSED_RECHECK_SECONDS = 1.0  # a paused key: resumed yet? anything expired?
SLOTS_RECHECK_SECONDS = 0.1  # parallelism full: slots of other pollers may come back
# A rate-limited key is read again once this much of its schedule has come within
# the horizon (a read takes its slots in chunks, not one at a time).
RATE_RECHECK_SECONDS = 0.1


@dataclass(slots=True)
class _Held:
    reason: str
    recheck_at: datetime | None  # database time; None: at once
    hold: Hold


class FlowGate:
    """Held keys and their recheck times; every method runs on the poller's thread."""

    def __init__(self) -> None:
        self._held: dict[FlowKey, _Held] = {}
        self._excluded: list[str] = []
        self._flying: dict[FlowKey, dict[UUID, None]] = {}
        self._slots: dict[FlowKey, int] = {}  # jobs in flight holding a slot, per key

    # --- held keys ----------------------------------------------------------------

    def excluded(self) -> list[str]:
        """The held keys, as the shard reads leave them out (``sqlutil.held_filter``)."""
        return self._excluded

    def hold(self, holds: dict[FlowKey, Hold], now: datetime) -> None:
        """Hold ``holds``' keys; each is looked at again when it may go."""
        if not holds:
            return
        for key, hold in holds.items():
            recheck: datetime | None
            if hold.reason == "rate" and hold.retry_at is not None:
                chunk = max(RATE_RECHECK_SECONDS, hold.gap)
                recheck = max(hold.retry_at, now) + timedelta(seconds=chunk)
            elif hold.reason == "new":  # a shard read met a limited key: read it now
                recheck = None
            elif hold.reason == "parallelism":
                recheck = now + timedelta(seconds=SLOTS_RECHECK_SECONDS)
            else:
                recheck = now + timedelta(seconds=PAUSED_RECHECK_SECONDS)
            self._held[key] = _Held(hold.reason, recheck, hold)
        self._excluded = [held_key(team, key) for team, key in self._held]
        metrics.FLOW_HELD.set(len(self._held))

    def again(self, key: FlowKey) -> None:
        """Look at ``key`` again at the next pass (a read took all it could: more wait)."""
        held = self._held.get(key)
        if held is not None:
            held.recheck_at = None

    def let_go(self, key: FlowKey) -> None:
        """Nothing of ``key`` waits: its jobs come with the shard reads again."""
        if self._held.pop(key, None) is not None:
            self._excluded = [held_key(team, key) for team, key in self._held]
            metrics.FLOW_HELD.set(len(self._held))

    def due(self, now: datetime, most: int) -> list[tuple[FlowKey, str, int]]:
        """The held keys to read now: why they were held and how many jobs of each a
        read may take at most (up to ``most``): the rate slots come since, or the
        key's parallelism."""
        found = []
        for key, held in self._held.items():
            if held.recheck_at is not None and held.recheck_at > now:
                continue
            hold, take = held.hold, most
            if hold.reason == "rate" and hold.retry_at is not None and hold.gap > 0:
                take = int((now - hold.retry_at).total_seconds() / hold.gap) + 1
            elif hold.reason == "parallelism" and hold.limit:
                take = hold.limit
            found.append((key, held.reason, max(1, min(most, take))))
        return found

    def next_recheck(self) -> datetime | None:
        """The earliest recheck time (None: nothing held, or due at the next pass)."""
        times = [h.recheck_at for h in self._held.values() if h.recheck_at is not None]
        return min(times, default=None)

    def held_for(self, key: FlowKey) -> str | None:
        """Why ``key`` is held (None: it is not)."""
        held = self._held.get(key)
        return None if held is None else held.reason

    def __len__(self) -> int:
        return len(self._held)

    # --- the keys' jobs in flight ---------------------------------------------------

    def flying(self, key: FlowKey) -> dict[UUID, None]:
        return self._flying.get(key) or {}

    def handed(self, jobs: Iterable[ClaimedJob]) -> None:
        for job in jobs:
            if job.flow_key is not None:
                key = (job.team_id, job.flow_key)
                self._flying.setdefault(key, {})[job.id] = None
                if job.flow:
                    self._slots[key] = self._slots.get(key, 0) + 1

    def resolved(self, jobs: Iterable[ClaimedJob]) -> None:
        """``jobs`` were written back: a key held for its slots may go again."""
        for job in jobs:
            if job.flow_key is None:
                continue
            key = (job.team_id, job.flow_key)
            flying = self._flying.get(key)
            if flying is not None:
                flying.pop(job.id, None)
                if not flying:
                    del self._flying[key]
            if job.flow:
                left = self._slots.get(key, 0) - 1
                if left > 0:
                    self._slots[key] = left
                else:
                    self._slots.pop(key, None)
            held = self._held.get(key)
            if held is not None and held.reason == "parallelism" and job.flow:
                held.recheck_at = None

    def has_slots(self) -> bool:
        """Whether a job in flight here holds a flow-control slot (they need renewing)."""
        return any(self._slots.values())

    def clear(self) -> None:
        """The window was dropped (leases gone): nothing is in flight any more."""
        self._flying.clear()
        self._slots.clear()
