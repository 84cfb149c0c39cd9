"""A poller's leases: heartbeat and renewal every lease/3, acquire and release toward
the assignment, and letting go of all of them when the poller fails or stops."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from datetime import datetime, timedelta

from polling import metrics
from polling.models import PollerState
from polling.ownership import leases as lease_sql
from polling.ownership import registration
from polling.ownership.assignment import assignment_inputs, shards_for
from scheduling.sharding.buckets import shard_count_max

logger = logging.getLogger("polling.engine.poller")


class LeaseKeeper:
    """The shards one poller holds (``leases``: ``{shard: epoch}``) and its state.

    ``register`` is called when the heartbeat finds the poller's row gone (registered
    again); ``on_renew(until)`` after each renewal (the poller renews its flow-control
    slots with its leases).
    """

    def __init__(
        self,
        *,
        name: str,
        lease_seconds: int,
        register: Callable[[], None],
        on_renew: Callable[[datetime], None] = lambda until: None,
    ) -> None:
        self.name = name
        self.lease_seconds = lease_seconds
        self._register = register
        self._on_renew = on_renew
        self.leases: dict[int, int] = {}  # shard -> epoch I hold
        self.state = PollerState.ACTIVE
        self.known_shards = 0  # lease rows ensured up to this shard count
        self.next_renewal: datetime | None = None
        self._renewed_at: float | None = None  # monotonic: leases last renewed or taken
        self.releasing: set[int] = set()  # shards to give up once their jobs are written
        # A release that failed (database down): no lease is renewed until one succeeds,
        # so claims of the current epoch are never kept.
        self.stranded = False
        self._standby_warned = False

    def readable(self) -> dict[int, int]:
        """The leases this poller may read under: held and not being given up."""
        return {s: e for s, e in self.leases.items() if s not in self.releasing}

    def lose(self, shards: Collection[int]) -> None:
        """Forget leases found lost (at a read or a write-back)."""
        if shards:
            metrics.LEASES_LOST.inc(len(shards))
            for shard in shards:
                self.leases.pop(shard, None)

    # --- renewal -------------------------------------------------------------------

    def renewal_due(self, now: datetime) -> bool:
        return self.next_renewal is None or now >= self.next_renewal

    def renew_if_due(self, now: datetime) -> None:
        if self.renewal_due(now):
            self._heartbeat_and_renew(now)

    def _heartbeat_and_renew(self, now: datetime) -> None:
        # Every lease/3 of database time, so a lease survives two missed renewals.
        self.next_renewal = now + timedelta(seconds=self.lease_seconds / 3)
        state = registration.poller_heartbeat(name=self.name, now=now)
        if state is None:
            self._register()
            state = PollerState.ACTIVE
        if state != self.state:
            logger.info("poller %s: state %s -> %s", self.name, self.state, state)
            self.state = PollerState(state)
        until = now + timedelta(seconds=self.lease_seconds)
        held = lease_sql.lease_renew(owner=self.name, now=now, until=until)
        self._on_renew(until)
        lost = set(self.leases) - set(held)
        if lost:
            metrics.LEASES_LOST.inc(len(lost))
            # How long since the last renewal tells a stall here (a lease or more)
            # from leases taken away (the console, or another poller's clock).
            since = None if self._renewed_at is None else time.monotonic() - self._renewed_at
            logger.warning(
                "poller %s: lost leases on shards %s (leases last extended %s ago, lease %ss)",
                self.name,
                sorted(lost),
                "never" if since is None else f"{since:.1f}s",
                self.lease_seconds,
            )
        self._renewed_at = time.monotonic()
        self.leases = held
        count = shard_count_max()
        if count > self.known_shards:
            registration.shard_rows_ensure(shard_count=count)
            self.known_shards = count

    # --- assignment ------------------------------------------------------------------

    def maintain(self, now: datetime, *, busy: Callable[[], set[int]], stopping: bool) -> None:
        """Heartbeat and renew every lease/3; acquire and release toward the assignment.

        ``busy()``: the shards with jobs in flight; such a shard goes only once they
        are written back (fenced on it).
        """
        if self.renewal_due(now):
            self._heartbeat_and_renew(now)
        live, pins = assignment_inputs(now=now, lease_seconds=self.lease_seconds)
        if self.state == PollerState.ACTIVE:
            wanted = shards_for(self.name, shard_count=self.known_shards, live=live, pins=pins)
        else:
            wanted = set()
        self._warn_if_standby(wanted, live)
        surplus = set(self.leases) - wanted
        self.releasing = surplus & busy()
        surplus -= self.releasing
        if surplus:
            released = lease_sql.lease_release(owner=self.name, shards=surplus)
            logger.info("poller %s: released shards %s", self.name, released)
            for shard in surplus:
                self.leases.pop(shard, None)
        missing = wanted - set(self.leases)
        if missing and not stopping:
            until = now + timedelta(seconds=self.lease_seconds)
            got = lease_sql.lease_acquire(owner=self.name, shards=missing, now=now, until=until)
            if got:
                self._renewed_at = self._renewed_at or time.monotonic()
                metrics.LEASES_ACQUIRED.inc(len(got))
                returned = lease_sql.inflight_clear_stale(owner=self.name, shards=got, now=now)
                logger.info(
                    "poller %s: acquired shards %s (epochs %s); %s stale batches forgotten",
                    self.name,
                    sorted(got),
                    sorted(set(got.values())),
                    returned,
                )
                self.leases.update(got)

    def release_all(self) -> None:
        """Release every lease this poller holds (all indices: owner = me is the filter).

        If that fails (database down), ``stranded`` stays set and no lease is renewed
        until a release succeeds, so claims of the current epoch are never kept: the
        next owner takes a new epoch and returns them to pending.
        """
        try:
            released = lease_sql.lease_release(owner=self.name, shards=range(self.known_shards))
        except Exception:
            logger.exception("poller %s: could not release leases", self.name)
            self.stranded = True
        else:
            self.stranded = False
            if released:
                logger.info("poller %s: released shards %s", self.name, released)
        self.leases = {}
        self.releasing = set()

    def _warn_if_standby(self, wanted: set[int], live: set[str]) -> None:
        standby = self.state == PollerState.ACTIVE and not wanted and self.known_shards > 0
        if standby and not self._standby_warned:
            logger.warning(
                "poller %s: standby: %s live pollers for %s shards; this one owns none",
                self.name,
                len(live | {self.name}),
                self.known_shards,
            )
        self._standby_warned = standby
