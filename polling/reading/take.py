"""Taking due jobs into flight: the reads of the pollers, one transaction each.

``batch_take`` reads a ``(bucket, shard)``, ``flow_take`` a held flow-control key
across the reader's shards. Each is one short transaction: the shard's window lock
(exclusive; ``scheduling.jobs.inflight`` gives the order a cancel follows), the read,
flow control (``polling.flow.admission``), then one in-flight batch row per shard,
fenced on the reader's unexpired lease (``LeaseLost`` otherwise). ``now`` comes
from the caller (the database clock read once per pass).

The lease is the lock: a shard's owner reads its due rows without a row lock and
records one in-flight batch per read; each job is written once, at write-back
(``polling.writing.writeback``).
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
    host_filter,
    is_postgres,
    placeholders,
    to_dt,
    to_json,
    to_uuid,
)
from polling.dispatch.base import ClaimedJob
from polling.dispatch.spans import traced_read
from polling.flow import admission
from polling.flow.admission import FlowKey, Grant, Hold
from polling.ownership.leases import LeaseLost
from polling.ownership.stall_bounds import LOCK_BOUND_CTE, bounded_atomic, lock_wait_param
from scheduling.jobs.inflight import WINDOW_LOCK_CLASS, ids_text

WINDOW_LOCK_SQL = "SELECT pg_advisory_xact_lock(%s, %s)"
WINDOW_LOCK_BOUNDED_SQL = LOCK_BOUND_CTE + "SELECT pg_advisory_xact_lock(%s, %s) FROM bound"

# ``request`` (the delivery contract) and ``trace_context`` last: NULL for default-shape,
# untraced jobs; ``request`` decoded only when set.
TAKE_COLUMNS = """id, team_id, due_at, attempts + 1, target_kind, target, payload, metadata,
    expires_at, schedule_id, scheduled_for, flow_control_key, request, trace_context"""
_TAKE_WIDTH = 14  # the columns of TAKE_COLUMNS

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


@traced_read("sendlater.read", "shard", "bucket", "owner", "epoch")
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
    hosts: Sequence[str] = (),
    slots_until: datetime | None = None,
) -> Taken:
    """Read up to ``limit`` due pending jobs of ``(bucket, shard)`` and record them in flight.

    The lease is the lock: no row changes. One transaction: the shard's window lock
    (exclusive; ``scheduling.jobs.inflight`` gives the order a cancel follows), then the
    read, oldest ``due_at`` first (from ``after`` on, if given: the caller's read
    cursor), then flow control (``polling.flow.admission.admit``: jobs of keys over their
    limits stay pending and are reported in ``holds``), then one ``InFlightBatch``
    row with the ids, fenced on my unexpired lease at ``epoch``: LeaseLost if it is
    not mine. Rows in ``skip`` (already in flight) are passed over; the read fetches
    ``fetch`` rows (default ``limit``) so that enough remain. Rows of the keys in
    ``held`` (``sqlutil.held_key`` form) are left out, and so are webhooks to the
    busy hosts whose URL patterns are in ``hosts`` (``polling.flow.host_lanes``). The
    bucket and shard are constants: PostgreSQL reads one partition's pending index. A lock held past
    ``stallbound.lock_wait_ms()`` (a stopped poller's window) raises ``WindowBusy``,
    nothing read; a stop inside the transaction is bounded by ``polling.ownership.stall_bounds``.
    """
    held_sql, held_params = held_filter("j", held)
    host_sql, host_params = host_filter("j", hosts)
    held_sql, held_params = held_sql + host_sql, held_params + host_params
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
        rows, grants, holds = admission.admit(
            rows, owner=owner, now=now, slots_until=slots_until or now, defer_limited=True
        )
        if not rows:
            return Taken((), holds)
        batch = batch_record(owner, shard, epoch, rows, now)
    decoded: dict[str, Any] = {}
    return Taken(
        (job_of(r, bucket, shard, epoch, batch, grants, decoded) for r in rows),
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
            *r[11:_TAKE_WIDTH],
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
    decoded: dict[str, Any] | None = None,
) -> ClaimedJob:
    """The claimed job of a ``rows_typed`` row. ``decoded`` (request text -> value, one
    per read) decodes each distinct ``request`` once: a team's jobs mostly share one
    shape, so the jobs of a read with the same text share one (read-only) dict."""
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
        request,
        trace_context,
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
        trace_context=trace_context,
        request=None if request is None else _request_of(request, decoded),
    )


def _request_of(text: Any, decoded: dict[str, Any] | None) -> Any:
    if decoded is None or not isinstance(text, str):
        return to_json(text)
    value = decoded.get(text)
    if value is None:
        value = decoded[text] = to_json(text)
    return value


def _uuid_or_none(value: object) -> UUID | None:
    return None if value is None else to_uuid(value)


# --- reads of a held flow-control key ----------------------------------------------

WINDOW_LOCKS_SQL = "SELECT pg_advisory_xact_lock(%s, s) FROM unnest(%s::int[]) AS s ORDER BY s"
WINDOW_LOCKS_BOUNDED_SQL = LOCK_BOUND_CTE + (
    "SELECT pg_advisory_xact_lock(%s, s) FROM bound, unnest(%s::int[]) AS s ORDER BY s"
)

# One flow-control key's due jobs on the reader's shards, in due order, across the
# buckets its shards have not drained (constants: pruned to those partitions).
FLOW_TAKE_SQL = (
    "SELECT "
    + TAKE_COLUMNS
    + """, bucket, shard
FROM scheduling_job j
WHERE j.team_id = %s AND j.flow_control_key = %s AND j.status = 'pending' AND j.due_at <= %s
  AND j.bucket > %s AND j.bucket <= %s AND j.shard IN ({shards}){expired}
ORDER BY j.due_at LIMIT %s
"""
)


@traced_read("sendlater.read_key", "team_id", "key", "owner")
def flow_take(
    *,
    owner: str,
    leases: dict[int, int],
    team_id: int,
    key: str,
    after_bucket: datetime,
    open_bucket: datetime,
    now: datetime,
    limit: int,
    skip: Container[UUID] = (),
    fetch: int | None = None,
    expired_only: bool = False,
    slots_until: datetime | None = None,
) -> Taken:
    """Read a held flow-control key's due jobs on my shards and record those it may send.

    For a key the caller keeps out of its shard reads (``held``): up to ``limit`` of
    the key's due pending jobs on the shards of ``leases`` (``{shard: epoch}``) in
    buckets after ``after_bucket`` up to ``open_bucket``, oldest first across those
    shards, through ``admission.admit``, then one batch per shard, fenced like
    ``batch_take`` (LeaseLost names the shard; nothing is recorded then). One
    transaction, which takes the window lock of every shard of ``leases`` first
    (ascending), each wait bounded as in ``batch_take`` (``WindowBusy``).
    ``expired_only``: only jobs past their ``expires_at`` (a paused key).
    ``drained`` is set when nothing of the key is left waiting.
    """
    shards = sorted(leases)
    if not shards:
        return Taken()
    sql = FLOW_TAKE_SQL.format(
        shards=placeholders(len(shards)),
        expired=" AND j.expires_at <= %s" if expired_only else "",
    )
    params = [team_id, key, dt(now), dt(after_bucket), dt(open_bucket), *shards]
    if expired_only:
        params.append(dt(now))
    fetch = fetch or limit
    with bounded_atomic(lock_wait=True) as bounded:
        if bounded:
            fetch_all(WINDOW_LOCKS_BOUNDED_SQL, [lock_wait_param(), WINDOW_LOCK_CLASS, shards])
        elif is_postgres():
            fetch_all(WINDOW_LOCKS_SQL, [WINDOW_LOCK_CLASS, shards])
        found = fetch_all(sql, [*params, fetch])
        rows = rows_typed([r[:_TAKE_WIDTH] for r in found])
        places = {
            row[0]: (to_dt(r[_TAKE_WIDTH]), int(r[_TAKE_WIDTH + 1]))
            for row, r in zip(rows, found, strict=True)
        }
        if skip:
            rows = [r for r in rows if r[0] not in skip]
        short = len(found) < fetch
        rows = rows[:limit]
        if not rows:
            taken = Taken()
            taken.drained = short
            return taken
        rows, grants, holds = admission.admit(
            rows, owner=owner, now=now, slots_until=slots_until or now
        )
        jobs: list[ClaimedJob] = []
        decoded: dict[str, Any] = {}
        for shard in sorted({places[r[0]][1] for r in rows}):
            mine = [r for r in rows if places[r[0]][1] == shard]
            batch = batch_record(owner, shard, leases[shard], mine, now)
            jobs += (
                job_of(r, places[r[0]][0], shard, leases[shard], batch, grants, decoded)
                for r in mine
            )
    jobs.sort(key=lambda job: job.due_at)
    taken = Taken(jobs, holds)
    taken.drained = short and not holds
    return taken
