"""Retention: old jobs go by whole partitions on PostgreSQL, in small batches on SQLite.

PostgreSQL: a partition whose range ends before ``now - SENDLATER_RETENTION_DAYS``
is emptied of what must survive (stragglers moved), its attempts, task runs and
idempotency keys deleted, then it is detached and dropped: no bulk DELETE of the
jobs themselves. What must survive:

- pending or claimed rows (a claim that old belongs to no live poller): back to
  pending in the open bucket, shard recomputed for that bucket's count;
- dead rows that died within ``SENDLATER_DEAD_RETENTION_DAYS``: moved to the open
  bucket keeping their status, so the dead-letter queue still shows them.

SQLite keeps a plain table: terminal rows older than retention are deleted in
batches of ``BATCH_ROWS`` with their attempts, task runs and keys.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.db import connection, transaction

from scheduling import conf, keys
from scheduling.models import DeliveryAttempt, IdempotencyKey, Job, JobStatus, TaskRun
from scheduling.sharding.buckets import shard_counts_record
from scheduling.sharding.clock import open_bucket
from scheduling.storage.partitions import Partition, is_partitioned, partitions_list

logger = logging.getLogger(__name__)

# One pruner at a time across pollers and the command (pg_try_advisory_xact_lock).
PRUNE_LOCK_KEY = 0x5E6D_1A7E_0002
BATCH_ROWS = 1000
TERMINAL = (JobStatus.DELIVERED, JobStatus.CANCELED, JobStatus.EXPIRED, JobStatus.FANNED_OUT)


@dataclass
class PruneReport:
    dropped: list[str]
    moved: int = 0  # stragglers and dead letters moved forward
    deleted: int = 0  # SQLite: job rows deleted
    busy: bool = False  # another pruner held the lock


STRAGGLERS_SQL = """
SELECT id FROM {name}
WHERE status = 'pending' OR (status = 'dead' AND updated_at >= %s)
LIMIT %s
"""
MOVE_SQL = """
WITH v (v_id, v_shard) AS (VALUES {rows})
UPDATE scheduling_job AS j SET bucket = %s, shard = v.v_shard, updated_at = %s
FROM v WHERE j.bucket >= %s AND j.bucket < %s AND j.id = v.v_id
"""
DELETE_DEPENDENTS_SQL = (
    "DELETE FROM scheduling_deliveryattempt WHERE job_id IN (SELECT id FROM {name})",
    "DELETE FROM scheduling_taskrun WHERE job_id IN (SELECT id FROM {name})",
    "DELETE FROM scheduling_idempotencykey WHERE job_id IN (SELECT id FROM {name})",
)
DETACH_SQL = "ALTER TABLE scheduling_job DETACH PARTITION {name}"
DROP_SQL = "DROP TABLE {name}"


def _move_stragglers(part: Partition, now: datetime) -> int:
    """Move what must survive out of ``part`` in batches; return how many rows moved."""
    target = open_bucket(now)
    count = shard_counts_record([target])[target]
    dead_since = now - conf.dead_retention()
    moved = 0
    with connection.cursor() as cursor:
        while True:
            cursor.execute(STRAGGLERS_SQL.format(name=part.name), [dead_since, BATCH_ROWS])
            ids: Sequence[UUID] = [row[0] for row in cursor.fetchall()]
            if not ids:
                return moved
            rows = ", ".join(["(%s::uuid, %s::integer)"] * len(ids))
            params = [v for i in ids for v in (i, keys.shard_of(i, count))]
            cursor.execute(MOVE_SQL.format(rows=rows), [*params, target, now, part.start, part.end])
            if cursor.rowcount == 0:  # the rows left meanwhile; nothing else to move
                return moved
            moved += cursor.rowcount


def partition_drop(part: Partition, *, now: datetime) -> int:
    """Empty ``part`` of survivors, delete its dependents, detach and drop it.

    One transaction; returns the rows moved forward. Lock: DETACH and DROP take
    ACCESS EXCLUSIVE on the parent for the end of the transaction (claims wait
    that long), so ``lock_timeout`` bounds the wait for it; a timeout rolls the
    whole partition back and the next run retries.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL lock_timeout = '5s'")
        moved = _move_stragglers(part, now)
        for sql in DELETE_DEPENDENTS_SQL:
            cursor.execute(sql.format(name=part.name))
        # Deferred FK checks queued by the moves (or by the caller's transaction)
        # would block the DROP ("pending trigger events"): run them now.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(DETACH_SQL.format(name=part.name))
        cursor.execute(DROP_SQL.format(name=part.name))
    return moved


def _prune_partitions(now: datetime) -> PruneReport:
    cutoff = now - conf.retention()
    report = PruneReport(dropped=[])
    for part in partitions_list():
        if part.is_default or part.end is None or part.end > cutoff:
            continue
        # A transaction-level lock per partition, not a session lock around them all:
        # behind pgbouncer in transaction pooling (docs/postgres.md) the unlock of a
        # session lock may run on another server connection than the lock did.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [PRUNE_LOCK_KEY])
            if not cursor.fetchone()[0]:
                report.busy = True
                return report
            # Another pruner may have dropped it between our listing and our lock.
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [part.name])
            if not cursor.fetchone()[0]:
                continue
            report.moved += partition_drop(part, now=now)
        report.dropped.append(part.name)
        logger.info("retention: dropped partition %s", part.name)
    return report


def _delete_batch(ids: list[UUID]) -> None:
    with transaction.atomic():
        DeliveryAttempt.objects.filter(job_id__in=ids).delete()
        TaskRun.objects.filter(job_id__in=ids).delete()
        IdempotencyKey.objects.filter(job_id__in=ids).delete()
        Job.objects.filter(id__in=ids).delete()


def _prune_rows(now: datetime) -> PruneReport:
    """The plain-table retention (SQLite): terminal rows in batches of ``BATCH_ROWS``."""
    cutoff = now - conf.retention()
    old = Job.objects.filter(bucket__lt=cutoff)
    doomed = old.filter(status__in=TERMINAL) | old.filter(
        status=JobStatus.DEAD, updated_at__lt=now - conf.dead_retention()
    )
    report = PruneReport(dropped=[])
    while ids := list(doomed.values_list("id", flat=True)[:BATCH_ROWS]):
        _delete_batch(ids)
        report.deleted += len(ids)
    return report


def retention_prune(*, now: datetime) -> PruneReport:
    """Apply retention once: whole partitions on PostgreSQL, batches on SQLite."""
    return _prune_partitions(now) if is_partitioned() else _prune_rows(now)
