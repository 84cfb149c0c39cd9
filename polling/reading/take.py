"""Every locking statement of the pollers, one statement per function.

Each function runs one SQL statement in autocommit (or inside the caller's
transaction), except ``batch_take``, whose lock, read and record form one short
transaction of its own. Each takes ``now`` from the caller (the database clock
read once per loop iteration) and is fenced where it writes jobs, batches or
checkpoints: ``owner = me AND epoch = my_epoch AND expires_at > now`` is part of
the same statement, so a poller paused past its lease changes nothing.

The lease is the lock: a shard's owner reads its due rows without a row lock and
records one in-flight batch per read (``scheduling.inflight`` has the lock order
shared with cancel and reschedule).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from polling.common.failpoints import failpoint
from polling.common.sql import (
    LEASE_FENCE,
    dt,
    fetch_all,
    held_filter,
    is_postgres,
    placeholders,
    rowcount,
    to_dt,
    to_json,
    to_uuid,
)
from polling.dispatch.base import ClaimedJob
from polling.flow import admission as flowdraw
from polling.flow.admission import FlowKey, Grant, Hold
from polling.ownership.stall_bounds import LOCK_BOUND_CTE, bounded_atomic, lock_wait_param
from polling.ownership.stall_bounds import WindowBusy as WindowBusy
from polling.reading.checkpoints import Front as Front
from polling.reading.checkpoints import checkpoint_advance as checkpoint_advance
from polling.reading.checkpoints import frontier as frontier
from polling.reading.checkpoints import sweep_find as sweep_find
from polling.reading.checkpoints import sweep_move as sweep_move
from polling.writing.writeback import Result as Result
from polling.writing.writeback import write_back as write_back
from scheduling.inflight import WINDOW_LOCK_CLASS, ids_text

# --- leases -------------------------------------------------------------------

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


# --- batches in flight ------------------------------------------------------------

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


INFLIGHT_FORGET_SQL = "DELETE FROM scheduling_inflightbatch WHERE id IN ({ids})"


def inflight_forget(batches: Iterable[int]) -> int:
    """Delete batch rows whose jobs are all written back (in the write-back's transaction)."""
    wanted = sorted(set(batches))
    if not wanted:
        return 0
    return rowcount(INFLIGHT_FORGET_SQL.format(ids=placeholders(len(wanted))), wanted)


WINDOW_LOCK_SQL = "SELECT pg_advisory_xact_lock(%s, %s)"
WINDOW_LOCK_BOUNDED_SQL = LOCK_BOUND_CTE + "SELECT pg_advisory_xact_lock(%s, %s) FROM bound"

TAKE_COLUMNS = """id, team_id, due_at, attempts + 1, target_kind, target, payload, metadata,
    expires_at, schedule_id, scheduled_for, flow_control_key"""

TAKE_SQL = (
    "SELECT "
    + TAKE_COLUMNS
    + """
FROM scheduling_job j
WHERE j.bucket = %s AND j.shard = %s AND j.status = 'pending' AND j.due_at <= %s{after}{held}
ORDER BY j.due_at LIMIT %s
"""
)

BATCH_RECORD_SQL = (
    """
INSERT INTO scheduling_inflightbatch (shard, epoch, owner, job_ids, job_count, created_at)
SELECT %s, %s, %s, %s, %s, %s WHERE """
    + LEASE_FENCE.format(shard="%s", epoch="%s")
    + "\nRETURNING id"
)


class LeaseLost(Exception):
    """The lease of the shard a batch was read from is no longer mine at that epoch."""

    def __init__(self, message: str, *, shard: int | None = None) -> None:
        super().__init__(message)
        self.shard = shard


class Taken(list[ClaimedJob]):
    """The jobs a read put in flight, and the flow-control keys it held back.

    ``holds``: ``{(team id, key): Hold}``; ``drained``: the read found every due job
    it looked for (a key read that took all it found: nothing of the key waits).
    """

    holds: dict[FlowKey, Hold]
    drained: bool = False

    def __init__(self, jobs: Iterable[ClaimedJob] = (), holds: dict | None = None) -> None:
        super().__init__(jobs)
        self.holds = holds or {}


def batch_take(
    *,
    owner: str,
    epoch: int,
    bucket: datetime,
    shard: int,
    now: datetime,
    limit: int,
    after: datetime | None = None,
    skip: Container[UUID] = (),
    fetch: int | None = None,
    held: Sequence[str] = (),
    slots_until: datetime | None = None,
) -> Taken:
    """Read up to ``limit`` due pending jobs of ``(bucket, shard)`` and record them in flight.

    The lease is the lock: no row changes. One transaction: the shard's window lock
    (exclusive; ``scheduling.inflight`` gives the order a cancel follows), then the
    read, oldest ``due_at`` first (from ``after`` on, if given: the caller's read
    cursor), then flow control (``polling.flow.admission.admit``: jobs of keys over their
    limits stay pending and are reported in ``holds``), then one ``InFlightBatch``
    row with the ids, fenced on my unexpired lease at ``epoch``: LeaseLost if it is
    not mine. Rows in ``skip`` (already in flight) are passed over; the read fetches
    ``fetch`` rows (default ``limit``) so that enough remain. Rows of the keys in
    ``held`` (``sqlutil.held_key`` form) are left out. The bucket and shard are
    constants: PostgreSQL reads one partition's pending index. A lock held past
    ``stallbound.lock_wait_ms()`` (a stopped poller's window) raises ``WindowBusy``,
    nothing read; a stop inside the transaction is bounded by ``polling.ownership.stall_bounds``.
    """
    held_sql, held_params = held_filter("j", held)
    sql = TAKE_SQL.format(after=" AND j.due_at >= %s" if after is not None else "", held=held_sql)
    params = [dt(bucket), shard, dt(now)]
    if after is not None:
        params.append(dt(after))
    with bounded_atomic(lock_wait=True) as bounded:
        if bounded:
            fetch_all(WINDOW_LOCK_BOUNDED_SQL, [lock_wait_param(), WINDOW_LOCK_CLASS, shard])
        elif is_postgres():
            fetch_all(WINDOW_LOCK_SQL, [WINDOW_LOCK_CLASS, shard])
        failpoint("take_locked")  # fault tests: stop holding the window lock
        rows = rows_typed(fetch_all(sql, [*params, *held_params, fetch or limit]))
        if skip:
            rows = [r for r in rows if r[0] not in skip]
        rows = rows[:limit]
        if not rows:
            return Taken()
        rows, grants, holds = flowdraw.admit(
            rows, owner=owner, now=now, slots_until=slots_until or now, defer_limited=True
        )
        if not rows:
            return Taken((), holds)
        batch = batch_record(owner, shard, epoch, rows, now)
    return Taken(
        (job_of(r, bucket, shard, epoch, batch, grants) for r in rows),
        holds,
    )


def batch_record(
    owner: str, shard: int, epoch: int, rows: Sequence[tuple[Any, ...]], now: datetime
) -> int:
    ids = ids_text(r[0] for r in rows)
    recorded = fetch_all(
        BATCH_RECORD_SQL,
        [shard, epoch, owner, ids, len(rows), dt(now), shard, owner, epoch, dt(now)],
    )
    if not recorded:
        raise LeaseLost(
            f"shard {shard}: lease at epoch {epoch} is no longer {owner}'s", shard=shard
        )
    return int(recorded[0][0])


def rows_typed(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows as PostgreSQL returns them (SQLite returns ids, datetimes, JSON as text)."""
    if is_postgres():
        return rows
    return [
        (
            to_uuid(r[0]),
            r[1],
            to_dt(r[2]),
            *r[3:8],
            to_dt(r[8]),
            _uuid_or_none(r[9]),
            to_dt(r[10]),
            r[11],
        )
        for r in rows
    ]


_NO_GRANT: Grant = (0, None, 0.0)


def job_of(
    row: tuple[Any, ...],
    bucket: datetime | None,
    shard: int,
    epoch: int,
    batch: int,
    grants: dict[Any, Grant],
) -> ClaimedJob:
    (
        job_id,
        team_id,
        due_at,
        attempt,
        target_kind,
        target,
        payload,
        metadata,
        expires_at,
        schedule_id,
        scheduled_for,
        flow_key,
    ) = row
    flow, send_at, gap = grants.get(job_id, _NO_GRANT) if grants else _NO_GRANT
    return ClaimedJob(
        id=job_id,
        team_id=team_id,
        due_at=due_at,
        bucket=bucket,  # type: ignore[arg-type]
        shard=shard,
        attempt=attempt,
        target_kind=target_kind,
        target=target,
        payload=to_json(payload),
        metadata=to_json(metadata) or {},
        expires_at=expires_at,
        schedule_id=schedule_id,
        scheduled_for=scheduled_for,
        epoch=epoch,
        batch=batch,
        flow_key=flow_key,
        flow=flow,
        send_at=send_at,
        send_gap=gap,
    )


def _uuid_or_none(value: object) -> UUID | None:
    return None if value is None else to_uuid(value)


# --- write-back: polling.writing.writeback; checkpoints, sweep: polling.reading.checkpoints
# (both re-exported here)


# --- reads of a held flow-control key: polling.reading.key_take (re-exported) ---------------

from polling.reading.key_take import flow_take as flow_take  # noqa: E402
