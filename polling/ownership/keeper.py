"""The poller's leases: heartbeat and renewal every lease/3, acquire and release toward
the assignment (a mixin of ``polling.engine.poller.Poller``, whose state it shares)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from polling import metrics
from polling.flow import admission as flowdraw
from polling.models import PollerState
from polling.ownership import registration as services
from polling.ownership.assignment import shards_for
from polling.reading import lag as selectors
from polling.reading import take as claims

logger = logging.getLogger("polling.engine.poller")


class LeaseKeeping:
    """Leases and assignment: the poller's attributes (``leases``, ``state``, ...) are used."""

    def _maintenance_due(self, now: datetime) -> bool:
        return self._next_maintenance is None or now >= self._next_maintenance

    def _renew_if_due(self) -> None:
        now = self._now()
        if self._maintenance_due(now):
            self._heartbeat_and_renew(now)

    def _heartbeat_and_renew(self, now: datetime) -> None:
        # Every lease/3 of database time, so a lease survives two missed renewals.
        self._next_maintenance = now + timedelta(seconds=self.lease_seconds / 3)
        state = services.poller_heartbeat(name=self.name, now=now)
        if state is None:
            self.start()
            state = PollerState.ACTIVE
        if state != self.state:
            logger.info("poller %s: state %s -> %s", self.name, self.state, state)
            self.state = PollerState(state)
        until = now + timedelta(seconds=self.lease_seconds)
        held = claims.lease_renew(owner=self.name, now=now, until=until)
        if self.pipeline.gate.has_slots():
            flowdraw.slots_renew(owner=self.name, until=until)
        lost = set(self.leases) - set(held)
        if lost:
            metrics.LEASES_LOST.inc(len(lost))
            logger.warning("poller %s: lost leases on shards %s", self.name, sorted(lost))
        self.leases = held
        count = selectors.shard_count_max()
        if count > self._known_shards:
            services.shard_rows_ensure(shard_count=count)
            self._known_shards = count

    def _maintain(self) -> None:
        """Heartbeat and renew every lease/3; acquire and release toward the assignment."""
        now = self._now()
        if self._stranded:
            self._drop_all_leases()
            if self._stranded:
                return
        if self._maintenance_due(now):
            self._heartbeat_and_renew(now)
        live, pins = selectors.assignment_inputs(now=now, lease_seconds=self.lease_seconds)
        if self.state == PollerState.ACTIVE:
            wanted = shards_for(self.name, shard_count=self._known_shards, live=live, pins=pins)
        else:
            wanted = set()
        self._warn_if_standby(wanted, live)
        surplus = set(self.leases) - wanted
        # A shard goes only once its jobs in flight are written back (fenced on it).
        self._releasing = surplus & self.pipeline.busy_shards()
        surplus -= self._releasing
        if surplus:
            released = claims.lease_release(owner=self.name, shards=surplus)
            logger.info("poller %s: released shards %s", self.name, released)
            for shard in surplus:
                self.leases.pop(shard, None)
        missing = wanted - set(self.leases)
        if missing and not self.stopping.is_set():
            until = now + timedelta(seconds=self.lease_seconds)
            got = claims.lease_acquire(owner=self.name, shards=missing, now=now, until=until)
            if got:
                metrics.LEASES_ACQUIRED.inc(len(got))
                returned = claims.inflight_clear_stale(owner=self.name, shards=got, now=now)
                logger.info(
                    "poller %s: acquired shards %s (epochs %s); %s stale batches forgotten",
                    self.name,
                    sorted(got),
                    sorted(set(got.values())),
                    returned,
                )
                self.leases.update(got)

    def _warn_if_standby(self, wanted: set[int], live: set[str]) -> None:
        standby = self.state == PollerState.ACTIVE and not wanted and self._known_shards > 0
        if standby and not self._standby_warned:
            logger.warning(
                "poller %s: standby: %s live pollers for %s shards; this one owns none",
                self.name,
                len(live | {self.name}),
                self._known_shards,
            )
        self._standby_warned = standby
