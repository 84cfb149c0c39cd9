"""Lease statements: take, renew and give up shard leases, fenced by epoch.

Each function runs one SQL statement, in autocommit or inside the caller's
transaction, with ``now`` from the caller (the database clock read once per pass).
Acquiring a free or expired lease increments its epoch, the fencing token every
later read and write of the shard is conditional on (``LEASE_FENCE``). A new
owner forgets the batches in flight of older epochs (``inflight_clear_stale``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from polling.common.sql import dt, fetch_all, placeholders, rowcount


class LeaseLost(Exception):
    """The lease of the shard a batch was read from is no longer mine at that epoch."""

    def __init__(self, message: str, *, shard: int | None = None) -> None:
        super().__init__(message)
        self.shard = shard


LEASE_ACQUIRE_SQL = """
UPDATE polling_shardlease SET owner = %s, epoch = epoch + 1, expires_at = %s, acquired_at = %s
WHERE shard IN ({shards}) AND (owner IS NULL OR expires_at IS NULL OR expires_at <= %s)
RETURNING shard, epoch
"""


def lease_acquire(
    *, owner: str, shards: Iterable[int], now: datetime, until: datetime
) -> dict[int, int]:
    """Take the free or expired leases among ``shards``; return ``{shard: new epoch}``.

    Lock: the lease rows' row locks for the statement. Two pollers racing for one
    lease: PostgreSQL re-checks the loser's WHERE on the winner's row version, so
    exactly one gets it. Each acquisition increments the epoch (fencing token).
    """
    wanted = sorted(set(shards))
    if not wanted:
        return {}
    sql = LEASE_ACQUIRE_SQL.format(shards=placeholders(len(wanted)))
    rows = fetch_all(sql, [owner, dt(until), dt(now), *wanted, dt(now)])
    return {int(shard): int(epoch) for shard, epoch in rows}


LEASE_RENEW_SQL = """
UPDATE polling_shardlease SET expires_at = %s WHERE owner = %s AND expires_at > %s
RETURNING shard, epoch
"""


def lease_renew(*, owner: str, now: datetime, until: datetime) -> dict[int, int]:
    """Extend every unexpired lease of ``owner`` to ``until``; return what it still holds.

    One statement for all leases. An expired lease is not renewed: it must be
    re-acquired with a new epoch, because another poller may have run it meanwhile.
    """
    rows = fetch_all(LEASE_RENEW_SQL, [dt(until), owner, dt(now)])
    return {int(shard): int(epoch) for shard, epoch in rows}


LEASE_RELEASE_SQL = """
UPDATE polling_shardlease SET owner = NULL, expires_at = NULL
WHERE owner = %s AND shard IN ({shards}) RETURNING shard
"""


def lease_release(*, owner: str, shards: Iterable[int]) -> list[int]:
    """Give up ``owner``'s leases on ``shards``; return the shards released.

    Only rows still owned by ``owner`` change, so releasing a lease another poller
    has since taken is a no-op. Call after the in-flight batch is written back.
    """
    wanted = sorted(set(shards))
    if not wanted:
        return []
    rows = fetch_all(LEASE_RELEASE_SQL.format(shards=placeholders(len(wanted))), [owner, *wanted])
    return sorted(int(shard) for (shard,) in rows)


LEASE_RELEASE_FENCED_SQL = """
UPDATE polling_shardlease SET owner = NULL, expires_at = NULL
WHERE shard = %s AND owner = %s AND epoch = %s
"""


def lease_release_fenced(*, shard: int, owner: str, epoch: int) -> bool:
    """Release ``shard`` only if ``owner`` still holds it at ``epoch`` (operator action).

    The operator names the owner and epoch they saw, so a lease that changed hands
    since is left alone. Returns whether the lease was released.
    """
    return rowcount(LEASE_RELEASE_FENCED_SQL, [shard, owner, epoch]) == 1


LEASE_PIN_SQL = "UPDATE polling_shardlease SET pinned_to = %s WHERE shard = %s"


def lease_pin(*, shard: int, poller: str | None) -> bool:
    """Pin ``shard`` to ``poller`` (None: back to the hash). Ownership is untouched.

    The current owner releases the shard at its next assignment pass, after its
    in-flight batch; the pinned poller then acquires it with a new epoch.
    """
    return rowcount(LEASE_PIN_SQL, [poller, shard]) == 1


INFLIGHT_CLEAR_STALE_SQL = """
DELETE FROM scheduling_inflightbatch
WHERE shard IN ({shards}) AND EXISTS (
    SELECT 1 FROM polling_shardlease l WHERE l.shard = scheduling_inflightbatch.shard
      AND l.owner = %s AND l.expires_at > %s AND scheduling_inflightbatch.epoch < l.epoch)
"""


def inflight_clear_stale(*, owner: str, shards: Iterable[int], now: datetime) -> int:
    """Forget the batches in flight of older epochs on ``shards``; fenced on my lease.

    Run by a new owner right after acquiring: those batches belong to a poller
    that lost the lease (dead or paused), whose write-back will be fenced out. Their
    rows are still pending, so this owner reads and delivers them again.
    """
    wanted = sorted(set(shards))
    if not wanted:
        return 0
    sql = INFLIGHT_CLEAR_STALE_SQL.format(shards=placeholders(len(wanted)))
    return rowcount(sql, [*wanted, owner, dt(now)])
