"""The sweep: pending rows written behind a shard's checkpoint move to the open bucket.

Such rows come from writes that committed after the poller had closed and passed
their bucket (DESIGN.md, "Late writes"). Both statements are fenced on the old shard's lease.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from polling import metrics
from polling.common.sql import (
    LEASE_FENCE,
    dt,
    fetch_all,
    id_in,
    placeholders,
    rowcount,
    to_dt,
    to_uuid,
    uid,
    values_rows,
)
from polling.ownership.stall_bounds import bounded_atomic
from scheduling import keys
from scheduling.sharding.buckets import shard_counts_record

logger = logging.getLogger(__name__)

SWEEP_BATCH_ROWS = 1000


SWEEP_FIND_SQL = """
SELECT j.id, j.shard, j.bucket, l.epoch FROM scheduling_job j
JOIN polling_shardcheckpoint c ON c.shard = j.shard
JOIN polling_shardlease l ON l.shard = j.shard
WHERE j.status = 'pending' AND j.bucket <= c.last_drained AND l.owner = %s AND l.expires_at > %s
ORDER BY j.bucket LIMIT %s
"""


def sweep_find(*, owner: str, now: datetime, limit: int) -> list[tuple[UUID, int, datetime, int]]:
    """Pending rows at or behind their shard's checkpoint, on shards ``owner`` holds.

    A read without locks: ``(id, shard, bucket, lease epoch)``. Such rows come from
    writes that committed after the poller had closed and passed their bucket.
    """
    rows = fetch_all(SWEEP_FIND_SQL, [owner, dt(now), limit])
    return [(to_uuid(i), int(s), to_dt(b), int(e)) for i, s, b, e in rows]  # type: ignore[misc]


SWEEP_MOVE_SQL = """
WITH v (v_id, v_old_bucket, v_old_shard, v_epoch, v_bucket, v_shard) AS (VALUES {rows})
UPDATE scheduling_job AS j SET bucket = v.v_bucket, shard = v.v_shard, updated_at = %s
FROM v
WHERE j.bucket IN ({buckets}) AND j.id {ids} AND j.id = v.v_id AND j.status = 'pending'
  AND j.bucket = v.v_old_bucket
  AND j.shard = v.v_old_shard AND """ + LEASE_FENCE.format(shard="v.v_old_shard", epoch="v.v_epoch")


def sweep_move(
    *, owner: str, moves: Sequence[tuple[UUID, datetime, int, int, datetime, int]], now: datetime
) -> int:
    """Move stranded rows to the open bucket: ``(id, old bucket, old shard, epoch, bucket, shard)``.

    One UPDATE ... FROM (VALUES ...), fenced on the old shard's lease. A row that
    changed meanwhile (claimed, cancelled, rescheduled) is left alone.
    """
    if not moves:
        return 0
    rows, params = values_rows(
        [(uid(i), dt(ob), os_, ep, dt(nb), ns) for i, ob, os_, ep, nb, ns in moves]
    )
    old = sorted({ob for _, ob, _, _, _, _ in moves})
    in_ids, id_params = id_in([m[0] for m in moves])
    sql = SWEEP_MOVE_SQL.format(rows=rows, buckets=placeholders(len(old)), ids=in_ids)
    return rowcount(sql, [*params, dt(now), *(dt(b) for b in old), *id_params, owner, dt(now)])


def sweep_stranded(*, owner: str, now: datetime, width: int) -> int:
    """Move up to SWEEP_BATCH_ROWS stranded rows of ``owner``'s shards; return how many."""
    stranded = sweep_find(owner=owner, now=now, limit=SWEEP_BATCH_ROWS)
    if not stranded:
        return 0
    open_bucket = keys.bucket_of(now, width)
    with bounded_atomic():
        count = shard_counts_record([open_bucket])[open_bucket]
        moves = [
            (job_id, bucket, shard, epoch, open_bucket, keys.shard_of(job_id, count))
            for job_id, shard, bucket, epoch in stranded
        ]
        moved = max(sweep_move(owner=owner, moves=moves, now=now), 0)
    # SQLite reports -1 rows for a statement that starts with WITH (hence the max).
    metrics.SWEEP_MOVED.inc(moved)
    logger.warning(
        "poller %s: swept %s late-written rows into bucket %s",
        owner,
        moved,
        open_bucket.isoformat(),
    )
    return moved
