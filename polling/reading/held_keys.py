"""The poller's reads of held flow-control keys (``polling.flow.gate``): a mixin of
``polling.engine.poller.Poller``, whose state it shares."""

from __future__ import annotations

import logging
from datetime import timedelta

from polling import metrics
from polling.reading import take as claims

logger = logging.getLogger("polling.engine.poller")


class HeldKeyReads:
    """Held keys' reads: the poller's attributes (``pipeline``, ``leases``, ...) are used."""

    def _read_held_keys(self) -> None:
        """Read the held flow-control keys that may go again (``polling.flow.gate``)."""
        gate = self.pipeline.gate
        for key, reason, take in gate.due(self._now(), self.batch_size):
            if self.stopping.is_set() or not self.leases or not self._room_for_a_batch():
                return
            self._renew_if_due()
            self._read_key(key, take, expired_only=False)
            if reason == "paused" and gate.held_for(key) == "paused":
                self._read_key(key, take, expired_only=True)  # expiry applies while paused

    def _read_key(self, key: tuple[int, str], take: int, *, expired_only: bool) -> None:
        gate, now = self.pipeline.gate, self._now()
        limit = min(take, self.pipeline.room())
        flying = gate.flying(key)
        leases = {s: e for s, e in self.leases.items() if s not in self._releasing}
        try:
            taken = claims.flow_take(
                owner=self.name,
                leases=leases,
                team_id=key[0],
                key=key[1],
                after_bucket=self._after_bucket,
                open_bucket=self._open_bucket,
                now=now,
                limit=limit,
                skip=flying,
                fetch=limit + len(flying),
                expired_only=expired_only,
                slots_until=now + timedelta(seconds=self.lease_seconds),
            )
        except claims.LeaseLost as lost:
            metrics.LEASES_LOST.inc()
            logger.warning("poller %s: lease of shard %s lost before a read", self.name, lost.shard)
            self.leases.pop(lost.shard, None)  # type: ignore[arg-type]
            return
        except claims.WindowBusy:
            metrics.WINDOWS_BUSY.inc()
            logger.warning(
                "poller %s: a window lock of key %s is held; read again on a later pass",
                self.name,
                key[1],
            )
            gate.again(key)
            return
        if taken:
            self.claimed_last += len(taken)
            self.pipeline.submit(taken, now, shard_read=False)
        if expired_only:
            return
        gate.hold(taken.holds, now)
        if taken.drained:
            gate.let_go(key)
        elif not taken.holds:
            gate.again(key)  # it took all it asked for: more wait
