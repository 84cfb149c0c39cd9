"""Checkpoints and the frontier: where each shard's drained prefix ends, where its read starts.

Part of the pollers' locking statements (beside ``polling.reading.take``): each
function is one statement in autocommit (or the caller's transaction), takes
``now`` from the caller and is fenced on the lease where it writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from polling.common.sql import (
    LEASE_FENCE,
    dt,
    fetch_all,
    floor,
    held_filter,
    host_filter,
    placeholders,
    to_dt,
    values_rows,
)

# Shard ``{shard}`` has pending rows (in flight or not) in recorded bucket ``b``: an
# exact index probe per bucket, pruned to one partition when it runs. ``IS TRUE``
# keeps it a subplan: a bare EXISTS is pulled up into a semi-join, which PostgreSQL
# plans against every partition (0.5 s a pass with 400 partitions, against ~1 ms).
_BUCKET_HOLDS_ROWS = (
    "(EXISTS (SELECT 1 FROM scheduling_job p WHERE p.bucket = b.start AND p.shard = {shard}"
    " AND p.status = 'pending'{held}) IS TRUE)"
)


# --- checkpoints --------------------------------------------------------------

FRONTIER_SQL = (
    """
WITH f AS MATERIALIZED (
    SELECT c.shard, c.last_drained, (
        SELECT MIN(b.start) FROM scheduling_bucket b
        WHERE b.start > COALESCE(c.last_drained, %s) AND b.start <= %s
          AND b.shard_count > c.shard AND """
    + _BUCKET_HOLDS_ROWS.format(shard="c.shard", held="{held_walk}")
    + """
    ) AS first_bucket
    FROM polling_shardcheckpoint c WHERE c.shard IN ({shards})
)
SELECT f.shard, f.last_drained, f.first_bucket, (
    SELECT MIN(p.due_at) FROM scheduling_job p
    WHERE p.bucket = f.first_bucket AND p.shard = f.shard AND p.status = 'pending'{held_due}
) FROM f
"""
)
# MATERIALIZED: evaluate the bucket walk once per shard (PostgreSQL would inline it twice).


@dataclass(frozen=True, slots=True)
class Front:
    """A shard's checkpoint, its first bucket holding work, and that bucket's next due."""

    checkpoint: datetime | None
    bucket: datetime | None
    next_due: datetime | None


def frontier(
    *,
    shards: Iterable[int],
    open_bucket: datetime,
    held: Sequence[str] = (),
    hosts: Sequence[str] = (),
) -> dict[int, Front]:
    """For each shard: checkpoint, first bucket after it with pending rows
    (up to ``open_bucket``) and the earliest pending ``due_at`` in that bucket.

    A read without locks. It walks the recorded buckets (``scheduling_bucket``)
    after each checkpoint and probes ``(bucket, shard)`` by index, so a stretch of
    empty minutes costs nothing and the answer is one statement for all shards.
    Rows of the flow-control keys in ``held`` (``held_key`` form) are not work: a
    bucket holding only those is passed over (the checkpoint still stops before it),
    and so are webhooks to the busy hosts whose URL patterns are in ``hosts``
    (``polling.flow.host_lanes``).
    """
    wanted = sorted(set(shards))
    if not wanted:
        return {}
    walk, walk_params = held_filter("p", held)
    by_host, host_params = host_filter("p", hosts)
    walk, walk_params = walk + by_host, walk_params + host_params
    sql = FRONTIER_SQL.format(shards=placeholders(len(wanted)), held_walk=walk, held_due=walk)
    rows = fetch_all(sql, [floor(), dt(open_bucket), *walk_params, *wanted, *walk_params])
    return {int(s): Front(to_dt(cp), to_dt(first), to_dt(due)) for s, cp, first, due in rows}


CHECKPOINT_ADVANCE_SQL = (
    """
WITH v (v_shard, v_epoch, v_target) AS (VALUES {rows})
UPDATE polling_shardcheckpoint AS c SET last_drained = v.v_target, updated_at = %s
FROM v
WHERE c.shard = v.v_shard AND (c.last_drained IS NULL OR c.last_drained < v.v_target) AND """
    + LEASE_FENCE.format(shard="v.v_shard", epoch="v.v_epoch")
    + """
  AND NOT EXISTS (
    SELECT 1 FROM scheduling_bucket b
    WHERE b.start > COALESCE(c.last_drained, %s) AND b.start <= v.v_target
      AND b.shard_count > c.shard AND """
    + _BUCKET_HOLDS_ROWS.format(shard="c.shard", held="")
    + """)
RETURNING shard, last_drained
"""
)


def checkpoint_advance(
    *, owner: str, targets: dict[int, tuple[int, datetime]], now: datetime
) -> dict[int, datetime]:
    """Move checkpoints forward: ``targets`` maps shard -> (my epoch, closed bucket).

    One statement for all shards. A checkpoint moves only forward, only under my
    unexpired lease at that epoch, and only if no pending row of the shard (in
    flight or not) lies in a bucket it passes (checked in the same statement). The caller
    passes closed buckets only. Returns ``{shard: new checkpoint}``.
    """
    if not targets:
        return {}
    rows, params = values_rows(
        [(shard, epoch, dt(target)) for shard, (epoch, target) in sorted(targets.items())]
    )
    sql = CHECKPOINT_ADVANCE_SQL.format(rows=rows)
    written = fetch_all(sql, [*params, dt(now), owner, dt(now), floor()])
    return {int(shard): to_dt(cp) for shard, cp in written}  # type: ignore[misc]
