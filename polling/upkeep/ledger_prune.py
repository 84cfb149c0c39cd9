"""Retention of the schedule ledger: rows before each schedule's ``ledger_floor`` go.

The ledger (``scheduling_scheduleoccurrence``) has one row per materialized
(schedule, instant); its unique key is what makes materialization exactly once
(``polling.upkeep.schedules``). A row is needed only while a plan could still hold its
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
from datetime import datetime

from polling.common.sql import fetch_all, is_postgres, placeholders, rowcount, to_dt, to_uuid, uid

BATCH_SCHEDULES = 200  # schedules whose rows one DELETE prunes
BUDGET_SECONDS = 0.25  # per call: the poller goes back to delivering

# My shards' schedules with a floor, in id order from ``after`` (keyset pages).
SCHEDULES_SQL = """
WITH n (indices) AS (SELECT COUNT(*) FROM polling_shardlease)
SELECT s.id, s.ledger_floor FROM scheduling_schedule s, n
WHERE s.id > %s AND s.ledger_floor IS NOT NULL AND n.indices > 0
  AND (s.shard_hash %% n.indices) IN ({shards})
ORDER BY s.id LIMIT %s
"""
# PostgreSQL: one index range of the ledger's primary key (schedule_id, scheduled_for)
# per schedule, bounded by its floor as read with the ids (a floor never moves back,
# so a floor read a moment ago is no later than the row's): only the rows deleted are
# read. (A join with the schedule table instead lets the planner scan the ledger.)
PRUNE_PG_SQL = """
DELETE FROM scheduling_scheduleoccurrence o
USING unnest(%s::uuid[], %s::timestamptz[]) AS v(schedule_id, floor)
WHERE o.schedule_id = v.schedule_id AND o.scheduled_for < v.floor
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


def ledger_prune_batch(floors: Sequence[tuple[uuid.UUID, datetime]]) -> int:
    """Delete the ledger rows of the schedules ``floors`` names before its floor (as
    read from the schedule, or earlier); return how many. One statement, no lock
    beyond its own rows (see the module docstring)."""
    if not floors:
        return 0
    if is_postgres():
        return rowcount(PRUNE_PG_SQL, [[i for i, _ in floors], [f for _, f in floors]])
    sql = PRUNE_SQLITE_SQL.format(ids=placeholders(len(floors)))
    return rowcount(sql, [uid(i) for i, _ in floors])


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
        found = fetch_all(sql, [uid(position), *sorted(shards), batch])
        floors = [(to_uuid(r[0]), to_dt(r[1])) for r in found]
        report.schedules += len(floors)
        report.deleted += ledger_prune_batch(floors)  # type: ignore[arg-type]
        if len(floors) < batch:
            return report
        position = floors[-1][0]
        if time.monotonic() - started >= budget_seconds:
            report.resume_after = position
            return report
