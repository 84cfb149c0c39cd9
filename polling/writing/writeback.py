"""Write-back: each job's one write, with its outcome; retries moved to their new bucket.

The lease is the lock (``polling.reading.take``): a job in flight is still a pending row,
read under its shard's lease at some epoch. Its write is fenced per row: the row
is still pending in the bucket it was read from, and that shard's lease is still
``owner``'s at the epoch of the read, unexpired. The attempt counter moves here
(not for a job handed back untried), and the row keeps its last attempt inline.
Rows are addressed by id and the bucket they were read in, listed as constants,
so PostgreSQL prunes to that partition.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import orjson

from polling import metrics
from polling.common.sql import (
    LEASE_FENCE,
    dt,
    fetch_all,
    id_in,
    is_postgres,
    placeholders,
    rowcount,
    to_uuid,
)


@dataclass(slots=True)  # not frozen (a batch makes one per job); read-only all the same
class Result:
    """The write-back of one job: its final status, or where it goes next."""

    job_id: UUID
    status: str  # delivered | pending (retry or deferred) | dead | expired | fanned_out
    due_at: datetime
    bucket: datetime
    shard: int
    last_error: str = ""
    # The bucket the row was read in, when a retry moves it (None: ``bucket``).
    from_bucket: datetime | None = None
    # False for a job handed back untried (deferred): no attempt is counted or recorded.
    counted: bool = True
    epoch: int = 0  # the lease epoch the job was read under
    attempt: int = 0  # this attempt's number
    # The attempt, kept on the row: when it started, how long it took, the HTTP status.
    started_at: datetime | None = None
    duration_ms: int | None = None
    status_code: int | None = None
    # A topic job fanned out: its children, endpoint id -> child job id
    # (``polling.writing.fanout``); PostgreSQL's write names them on the row.
    children: dict[str, str] | None = None

    @property
    def claimed_bucket(self) -> datetime:
        return self.from_bucket or self.bucket


# Per row: the lease of the row's shard at the epoch the job was read under.
_FENCE_PER_ROW = LEASE_FENCE.format(shard="j.shard", epoch="v.v_epoch")

WRITE_BACK_SQL = (
    """
WITH v (v_id, v_from_bucket, v_status, v_due_at, v_bucket, v_shard, v_error, v_tried, v_epoch,
        v_started, v_ms, v_code)
  AS (VALUES {rows})
UPDATE scheduling_job AS j SET
    status = v.v_status, due_at = v.v_due_at, bucket = v.v_bucket, shard = v.v_shard,
    last_error = v.v_error, updated_at = %s, attempts = j.attempts + v.v_tried,
    delivered_at = CASE WHEN v.v_status IN ('delivered', 'fanned_out') THEN %s
        ELSE j.delivered_at END,
    last_attempt_at = CASE WHEN v.v_tried = 1 THEN v.v_started ELSE j.last_attempt_at END,
    last_attempt_ms = CASE WHEN v.v_tried = 1 THEN v.v_ms ELSE j.last_attempt_ms END,
    last_status_code = CASE WHEN v.v_tried = 1 THEN v.v_code ELSE j.last_status_code END
FROM v
WHERE j.bucket IN ({buckets}) AND j.id {ids} AND j.id = v.v_id
  AND j.bucket = v.v_from_bucket AND {pending} AND """
    + _FENCE_PER_ROW
    + "\nRETURNING id"
)
# Each VALUES column typed on PostgreSQL (a NULL in the first row would be text).
_PG_ROW = (
    "(%s::uuid, %s::timestamptz, %s, %s::timestamptz, %s::timestamptz, %s::integer, %s,"
    " %s::integer, %s::bigint, %s::timestamptz, %s::integer, %s::smallint)"
)
_SQLITE_ROW = "(" + ", ".join(["%s"] * 12) + ")"


WRITE_BACK_DELIVERED_SQL = """
UPDATE scheduling_job AS j SET status = %s, attempts = j.attempts + 1, last_error = '',
    updated_at = %s, delivered_at = %s,
    last_attempt_at = to_timestamp((d.m -> j.id::text ->> 0)::bigint / 1e6),
    last_attempt_ms = (d.m -> j.id::text ->> 1)::integer,
    last_status_code = (d.m -> j.id::text ->> 2)::smallint{children}
FROM (SELECT %s::jsonb AS m) AS d
WHERE j.bucket IN ({buckets}) AND j.shard IN ({shards}) AND j.id {ids}
  AND {pending} AND {fence}
RETURNING id"""
# A topic job fanned out names its children in the same write (its fifth value).
_CHILDREN_NAMED = (
    ",\n    request = COALESCE(j.request, '{}'::jsonb)"
    " || jsonb_build_object('children', d.m -> j.id::text -> 4)"
)
# Each row's attempt comes from one JSON object keyed by id (``d.m``): a one-row join,
# so the plan stays the id list's primary-key probes. A join to the group's rows
# (VALUES or unnest) lets PostgreSQL plan a nested loop over the whole bucket when
# the partition's statistics are stale (filled minutes ago): seconds, not a millisecond.

_FENCE_ROW_EPOCH = (
    "EXISTS (SELECT 1 FROM polling_shardlease l WHERE l.shard = j.shard AND l.owner = %s"
    " AND l.epoch = (d.m -> j.id::text ->> 3)::bigint AND l.expires_at > %s)"
)
# One shard, one epoch (a poller's usual group): the fence as constants, so the lease
# is probed once for the statement instead of once per row.
_FENCE_ONE_LEASE = LEASE_FENCE.format(shard="%s", epoch="%s")

# Both statements address their rows by id, and are planned to probe the primary key
# (id, bucket) once per id, whatever the partition's statistics say. A partition
# filled seconds ago has none (autovacuum analyzes it a minute or more later): the
# planner then takes ``bucket = X`` for one row and walks the bucket's whole pending
# index (``job_pending_bucket_shard_due``), or the partition itself, filtering by id:
# 100,000 entries for each group of 1,000, ~70 us of PostgreSQL a delivered job on a
# burst (auto_explain, ``bench/webhook.py`` shape b, 2026-12-06). So on PostgreSQL:
# - the pending test compares under the "C" collation, which the planner cannot match
#   to the partial indexes' ``status = 'pending'`` (a proof needs the same collation);
#   the answer is the same, "C" and the default collation both comparing equal
#   strings as equal;
# - the statements run with sequential scans off (``SET LOCAL``, put back after them),
#   which leaves the primary key as the one path.
_PENDING = {True: "j.status COLLATE \"C\" = 'pending'", False: "j.status = 'pending'"}
_SEQSCAN_OFF = "SET LOCAL enable_seqscan = off"
_SEQSCAN_ON = "SET LOCAL enable_seqscan = on"


@contextmanager
def by_primary_key() -> Iterator[None]:
    """Plan the statements inside by the primary key, whatever the partitions'
    statistics say (sequential scans off, see ``_PENDING``). PostgreSQL, inside a
    transaction; elsewhere it does nothing."""
    if not is_postgres():
        yield
        return
    rowcount(_SEQSCAN_OFF, [])
    yield  # an error inside aborts the transaction, and its SET LOCAL with it
    rowcount(_SEQSCAN_ON, [])


def write_back(*, owner: str, results: Sequence[Result], now: datetime) -> set[UUID]:
    """Write a group's results; return the ids written. At most three UPDATEs (on
    PostgreSQL between two ``SET LOCAL`` of the planner, see ``_PENDING``).

    Delivered rows (the common case) are, on PostgreSQL, one UPDATE by id list
    (topic jobs fanned out another), each row's attempt read from one JSON
    parameter: the statement's text is the same whatever the group's size, and the
    id list is probed in the primary key, also in a partition with stale or no
    statistics (filled seconds ago). Every other
    outcome (retry, deferred, dead, expired), and all of them on SQLite, go in one
    UPDATE ... FROM (VALUES ...). Call inside one transaction.
    """
    fast: dict[str, list[Result]] = {}
    others = []
    pg = is_postgres()
    for r in results:
        if pg and r.status in _FAST and r.from_bucket is None:
            fast.setdefault(r.status, []).append(r)
        else:
            others.append(r)
    written = []
    if not results:
        return set()
    with by_primary_key():
        for status, group in fast.items():
            written += _write_delivered(owner, status, group, now)
        if others:
            written += _write_values(owner, others, now)
    return {to_uuid(job_id) for (job_id,) in written}


# The outcomes written by id list: a delivered job, and a topic job fanned out (its
# children were inserted in this transaction), each one statement a group.
_FAST = frozenset({"delivered", "fanned_out"})


def _write_delivered(
    owner: str, status: str, results: Sequence[Result], now: datetime
) -> list[tuple]:
    buckets = sorted({r.bucket for r in results})
    shards = sorted({r.shard for r in results})
    epochs = {(r.shard, r.epoch) for r in results}
    if len(epochs) == 1:
        ((shard, epoch),) = epochs
        fence, fence_params = _FENCE_ONE_LEASE, [shard, owner, epoch, dt(now)]
    else:
        fence, fence_params = _FENCE_ROW_EPOCH, [owner, dt(now)]
    in_ids, id_params = id_in([r.job_id for r in results])
    sql = WRITE_BACK_DELIVERED_SQL.format(
        buckets=placeholders(len(buckets)),
        shards=placeholders(len(shards)),
        ids=in_ids,
        fence=fence,
        pending=_PENDING[True],
        children=_CHILDREN_NAMED if status == "fanned_out" else "",
    )
    attempts = orjson.dumps(
        {
            str(r.job_id): (
                None if r.started_at is None else round(r.started_at.timestamp() * 1_000_000),
                r.duration_ms,
                r.status_code,
                r.epoch,
                r.children,
            )
            for r in results
        }
    ).decode()
    params = [status, dt(now), dt(now), attempts, *(dt(b) for b in buckets), *shards, *id_params]
    return fetch_all(sql, [*params, *fence_params])


def _write_values(owner: str, results: Sequence[Result], now: datetime) -> list[tuple]:
    row = _PG_ROW if is_postgres() else _SQLITE_ROW
    params: list[object] = []
    for r in results:
        params += (
            r.job_id if is_postgres() else r.job_id.hex,
            dt(r.claimed_bucket),
            r.status,
            dt(r.due_at),
            dt(r.bucket),
            r.shard,
            r.last_error,
            1 if r.counted else 0,
            r.epoch,
            dt(r.started_at),
            r.duration_ms,
            r.status_code,
        )
    buckets = sorted({r.claimed_bucket for r in results})
    in_ids, id_params = id_in([r.job_id for r in results])
    sql = WRITE_BACK_SQL.format(
        rows=", ".join([row] * len(results)),
        buckets=placeholders(len(buckets)),
        ids=in_ids,
        pending=_PENDING[is_postgres()],
    )
    tail = [*(dt(b) for b in buckets), *id_params, owner, dt(now)]
    return fetch_all(sql, [*params, dt(now), dt(now), *tail])


INFLIGHT_FORGET_SQL = "DELETE FROM scheduling_inflightbatch WHERE id IN ({ids})"


def inflight_forget(batches: Iterable[int]) -> int:
    """Delete batch rows whose jobs are all written back (in the write-back's transaction)."""
    wanted = sorted(set(batches))
    if not wanted:
        return 0
    return rowcount(INFLIGHT_FORGET_SQL.format(ids=placeholders(len(wanted))), wanted)


def outcomes_export(results: Sequence[Result], written: Collection[UUID], now: datetime) -> None:
    """Export what a write-back recorded: outcomes by result, delivery latency.

    One counter increment per result kind, not per job; the delivered jobs' latencies
    observed as one group.
    """
    counts: dict[str, int] = {}
    latencies: list[float] = []
    everything = len(written) == len(results)  # the usual batch: no id lookups
    for result in results:
        if not everything and result.job_id not in written:
            continue
        if result.status == "pending":
            kind = "retry" if result.counted else "deferred"
        else:
            kind = result.status
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "delivered":
            latencies.append(max(0.0, (now - result.due_at).total_seconds()))
    if latencies:
        metrics.DELIVERY_LATENCY.observe_many(latencies)
    for kind, count in counts.items():
        metrics.DELIVERIES.labels(kind).inc(count)
