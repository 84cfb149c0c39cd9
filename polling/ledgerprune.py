"""Retention of the schedule ledger: rows before each schedule's ``ledger_floor`` go.

The ledger (``scheduling_scheduleoccurrence``) has one row per materialized
(schedule, instant); its unique key is what makes materialization exactly once
(``polling.schedules``). A row is needed only while a plan could still hold its
instant, and no plan can hold an instant before the schedule's ``ledger_floor``:

- the planner leaves such instants out, and its compare-and-set of the cursor writes
  nothing if its first instant lies before the floor it finds on the row *at commit*
  (the statement locks the row, so a floor moved meanwhile is seen);
- only that compare-and-set moves the floor, to ``min(cursor it planned from,
  now - SENDLATER_SCHEDULE_LEDGER_KEEP_SECONDS)``, and never back; an API change that
  moves the cursor back (pause, PATCH) leaves the floor where it is.

So a row below the floor may be deleted at any moment, by anyone, without a lock:
a materializer that is behind (it read the schedule before the floor moved, or its
clock is late) either plans no instant below the floor or writes nothing at all. Each
poller prunes the schedules of its own shards (the same ``shard_hash`` rule as the
planner), a batch of schedules per statement, within a time budget, resuming where it
stopped at its next turn.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from polling.sqlutil import fetch_all, is_postgres, placeholders, rowcount, to_uuid, uid

BATCH_SCHEDULES = 200  # schedules whose rows one DELETE prunes
BUDGET_SECONDS = 0.25  # per call: the poller goes back to delivering

# My shards' schedules with a floor, in id order from ``after`` (keyset pages).
SCHEDULES_SQL = """
WITH n (indices) AS (SELECT COUNT(*) FROM polling_shardlease)
SELECT s.id FROM scheduling_schedule s, n
WHERE s.id > %s AND s.ledger_floor IS NOT NULL AND n.indices > 0
  AND (s.shard_hash %% n.indices) IN ({shards})
ORDER BY s.id LIMIT %s
"""
# PostgreSQL: one index range of the ledger's primary key (schedule_id, scheduled_for)
# per schedule, bounded by its floor: only the rows deleted are read.
PRUNE_PG_SQL = """
DELETE FROM scheduling_scheduleoccurrence o USING scheduling_schedule s
WHERE s.id = ANY(%s::uuid[]) AND o.schedule_id = s.id AND o.scheduled_for < s.ledger_floor
"""
PRUNE_SQLITE_SQL = """
DELETE FROM scheduling_scheduleoccurrence WHERE schedule_id IN ({ids}) AND scheduled_for < (
    SELECT s.ledger_floor FROM scheduling_schedule s
    WHERE s.id = scheduling_scheduleoccurrence.schedule_id)
"""
FIRST_ID = uuid.UUID(int=0)


@dataclass(slots=True)
class LedgerPruned:
    deleted: int = 0
    schedules: int = 0  # schedules looked at
    resume_after: uuid.UUID | None = None  # None: went through all of them


def ledger_prune_batch(schedule_ids: Sequence[uuid.UUID]) -> int:
    """Delete the ledger rows of ``schedule_ids`` before each one's floor; return how
    many. One statement, no lock beyond its own rows (see the module docstring)."""
    if not schedule_ids:
        return 0
    if is_postgres():
        return rowcount(PRUNE_PG_SQL, [list(schedule_ids)])
    sql = PRUNE_SQLITE_SQL.format(ids=placeholders(len(schedule_ids)))
    return rowcount(sql, [uid(i) for i in schedule_ids])


def ledger_prune(
    *,
    shards: Sequence[int],
    after: uuid.UUID | None = None,
    budget_seconds: float = BUDGET_SECONDS,
    batch: int = BATCH_SCHEDULES,
) -> LedgerPruned:
    """Prune the ledger rows of the schedules of ``shards``, from the schedule after
    ``after`` on, a batch at a time, until done or ``budget_seconds`` ran out."""
    report = LedgerPruned()
    if not shards:
        return report
    sql = SCHEDULES_SQL.format(shards=placeholders(len(shards)))
    position = after or FIRST_ID
    started = time.monotonic()
    while True:
        ids = [to_uuid(r[0]) for r in fetch_all(sql, [uid(position), *sorted(shards), batch])]
        report.schedules += len(ids)
        report.deleted += ledger_prune_batch(ids)
        if len(ids) < batch:
            return report
        position = ids[-1]
        if time.monotonic() - started >= budget_seconds:
            report.resume_after = position
            return report
