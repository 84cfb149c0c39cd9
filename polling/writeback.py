"""Write-back of a claimed batch: final statuses, retries moved to their new bucket.

Fenced like every claim statement (see ``polling.claims``): a row is written only
while still claimed by ``owner`` at the epoch it was claimed with, under that
unexpired lease. Rows are addressed by id and the bucket they were claimed in,
listed as constants, so PostgreSQL prunes to that partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from polling.sqlutil import (
    LEASE_FENCE,
    dt,
    fetch_all,
    id_in,
    placeholders,
    to_uuid,
    uid,
    values_rows,
)


@dataclass(slots=True)  # not frozen (a batch makes one per job); read-only all the same
class Result:
    """The write-back of one claimed job: its final status, or where it goes next."""

    job_id: UUID
    status: str  # delivered | pending (retry) | dead | expired
    due_at: datetime
    bucket: datetime
    shard: int
    last_error: str = ""
    # The bucket the row was claimed in, when a retry moves it (None: ``bucket``).
    from_bucket: datetime | None = None
    # False for a job handed back untried (deferred): its claim's attempt is taken back
    # and no attempt row is written.
    counted: bool = True

    @property
    def claimed_bucket(self) -> datetime:
        return self.from_bucket or self.bucket


WRITE_BACK_SQL = (
    """
WITH v (v_id, v_from_bucket, v_status, v_due_at, v_bucket, v_shard, v_error, v_untried)
  AS (VALUES {rows})
UPDATE scheduling_job AS j SET
    status = v.v_status, due_at = v.v_due_at, bucket = v.v_bucket, shard = v.v_shard,
    last_error = v.v_error, updated_at = %s, attempts = j.attempts - v.v_untried,
    delivered_at = CASE WHEN v.v_status = 'delivered' THEN %s ELSE j.delivered_at END,
    claim_owner = CASE WHEN v.v_status = 'pending' THEN NULL ELSE j.claim_owner END,
    claim_epoch = CASE WHEN v.v_status = 'pending' THEN NULL ELSE j.claim_epoch END
FROM v
WHERE j.bucket IN ({buckets}) AND j.id {ids} AND j.id = v.v_id
  AND j.bucket = v.v_from_bucket AND j.status = 'claimed' AND j.claim_owner = %s AND """
    + LEASE_FENCE.format(shard="j.shard", epoch="j.claim_epoch")
    + "\nRETURNING id"
)


WRITE_BACK_DELIVERED_SQL = """
UPDATE scheduling_job AS j SET status = 'delivered', last_error = '', updated_at = %s,
    delivered_at = %s
WHERE j.bucket IN ({buckets}) AND j.shard IN ({shards}) AND j.id {ids}
  AND j.status = 'claimed' AND j.claim_owner = %s AND {fence}
RETURNING id"""
# Per row: the lease of the row's shard at the epoch the row was claimed with.
_FENCE_PER_ROW = LEASE_FENCE.format(shard="j.shard", epoch="j.claim_epoch")
# One shard, one epoch (a poller's batch): the same fence as constants, so the
# lease is probed once for the statement instead of once per row.
_FENCE_ONE_LEASE = "j.claim_epoch = %s AND " + LEASE_FENCE.format(shard="%s", epoch="%s")


def _write_delivered(
    owner: str, results: Sequence[Result], now: datetime, epoch: int | None
) -> list[tuple]:
    buckets = sorted({r.bucket for r in results})
    shards = sorted({r.shard for r in results})
    if epoch is not None and len(shards) == 1:
        fence, fence_params = _FENCE_ONE_LEASE, [epoch, shards[0], owner, epoch, dt(now)]
    else:
        fence, fence_params = _FENCE_PER_ROW, [owner, dt(now)]
    in_ids, id_params = id_in([r.job_id for r in results])
    sql = WRITE_BACK_DELIVERED_SQL.format(
        buckets=placeholders(len(buckets)),
        shards=placeholders(len(shards)),
        ids=in_ids,
        fence=fence,
    )
    params = [dt(now), dt(now), *(dt(b) for b in buckets), *shards]
    return fetch_all(sql, [*params, *id_params, owner, *fence_params])


def write_back(
    *, owner: str, results: Sequence[Result], now: datetime, epoch: int | None = None
) -> set[UUID]:
    """Write a batch's results; return the ids written. At most two statements.

    Delivered rows (the common case) are one UPDATE by id list, with no VALUES
    join: on a partition whose statistics are stale (filled minutes ago, not yet
    analysed) PostgreSQL would plan the join as a nested loop over the VALUES,
    ~0.5 s for 1,000 rows. Every other outcome (retry, dead, expired) goes in one
    UPDATE ... FROM (VALUES ...). Call both inside one transaction.

    Fenced per row: the row is still claimed by ``owner`` at the epoch it was
    claimed with, and that lease is still ``owner``'s at that epoch and unexpired.
    ``epoch`` (the lease a one-shard batch was claimed under) lets the delivered
    rows' statement check that one lease once rather than per row.
    A retried row moves to its new ``(bucket, shard)``, which the caller recorded
    with ``shard_counts_record`` in the same transaction. Rows are addressed by
    ``(id, claimed bucket)`` and the claimed buckets are also listed as constants
    (one for a poller's batch), so PostgreSQL prunes to their partitions. The ids
    are listed too: an index condition on the primary key that keeps the plan on
    index probes even when the partition's statistics are stale (a freshly filled
    partition, not yet analysed, otherwise invites a nested loop over a seq scan).
    """
    delivered = [r for r in results if r.status == "delivered" and r.from_bucket is None]
    others = [r for r in results if r.status != "delivered" or r.from_bucket is not None]
    written = _write_delivered(owner, delivered, now, epoch) if delivered else []
    if others:
        written += _write_others(owner, others, now)
    return {to_uuid(job_id) for (job_id,) in written}


def _write_others(owner: str, results: Sequence[Result], now: datetime) -> list[tuple]:
    rows, params = values_rows(
        [
            (
                uid(r.job_id),
                dt(r.claimed_bucket),
                r.status,
                dt(r.due_at),
                dt(r.bucket),
                r.shard,
                r.last_error,
                0 if r.counted else 1,
            )
            for r in results
        ]
    )
    buckets = sorted({r.claimed_bucket for r in results})
    in_ids, id_params = id_in([r.job_id for r in results])
    sql = WRITE_BACK_SQL.format(rows=rows, buckets=placeholders(len(buckets)), ids=in_ids)
    tail = [*(dt(b) for b in buckets), *id_params, owner, owner, dt(now)]
    return fetch_all(sql, [*params, dt(now), dt(now), *tail])
