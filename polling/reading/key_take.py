"""The read of a held flow-control key: its due jobs on the reader's shards, in due
order, recorded in flight (one batch per shard) through ``polling.flow.admission``.

One of the pollers' locking statements (``polling.reading.take`` re-exports it), with the
same contract as ``claims.batch_take``: one short transaction, the window locks
first, fenced on the leases.
"""

from __future__ import annotations

from collections.abc import Container
from datetime import datetime
from uuid import UUID

from polling.common.sql import dt, fetch_all, is_postgres, placeholders, to_dt
from polling.dispatch.base import ClaimedJob
from polling.flow import admission as flowdraw
from polling.ownership.stall_bounds import LOCK_BOUND_CTE, bounded_atomic, lock_wait_param
from polling.reading.take import TAKE_COLUMNS, Taken, batch_record, job_of, rows_typed
from scheduling.inflight import WINDOW_LOCK_CLASS

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
    shards, through ``flowdraw.admit``, then one batch per shard, fenced like
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
        rows = rows_typed([r[:12] for r in found])
        places = {row[0]: (to_dt(r[12]), int(r[13])) for row, r in zip(rows, found, strict=True)}
        if skip:
            rows = [r for r in rows if r[0] not in skip]
        short = len(found) < fetch
        rows = rows[:limit]
        if not rows:
            taken = Taken()
            taken.drained = short
            return taken
        rows, grants, holds = flowdraw.admit(
            rows, owner=owner, now=now, slots_until=slots_until or now
        )
        jobs: list[ClaimedJob] = []
        for shard in sorted({places[r[0]][1] for r in rows}):
            mine = [r for r in rows if places[r[0]][1] == shard]
            batch = batch_record(owner, shard, leases[shard], mine, now)
            jobs += (job_of(r, places[r[0]][0], shard, leases[shard], batch, grants) for r in mine)
    jobs.sort(key=lambda job: job.due_at)
    taken = Taken(jobs, holds)
    taken.drained = short and not holds
    return taken
