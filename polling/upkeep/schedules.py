"""Recurring schedules materialized by the pollers: each occurrence an ordinary job.

The poller calls ``schedules_materialize(owner=..., leases=..., now=...)`` once per
iteration. A schedule belongs to shard ``mmh3(str(id)) % S`` (S = the shard indices
in use, as many as lease rows): that shard's owner plans it, at least
SENDLATER_SCHEDULE_AHEAD_SECONDS ahead of each instant.

Exactly-once per (schedule, instant) rests on two things, both in one transaction
(``occurrences_write_fenced``):

1. a compare-and-set of the schedule's cursor ``(next_at, version)``, fenced on my
   lease of its shard: a poller that lost the lease, a planner that raced another,
   or one that read the row before an API change (pause, PATCH) writes nothing; nor
   does a plan holding an instant before the schedule's ``ledger_floor`` (the rows
   before it may be pruned: ``polling.upkeep.ledger_prune``), and plans leave such instants
   out;
2. the ledger ``scheduling_scheduleoccurrence`` with its unique key
   ``(schedule_id, scheduled_for)``: rows are inserted ON CONFLICT DO NOTHING and a
   job is written only for the ledger rows this statement inserted.

A crash anywhere before COMMIT leaves nothing; after it, the cursor has moved.
The jobs go in by one COPY (PostgreSQL) into their buckets and shards, like any
bulk-scheduled job; from there on they are ordinary jobs.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from polling.common.failpoints import failpoint
from polling.common.sql import (
    LEASE_FENCE,
    dt,
    fetch_all,
    is_postgres,
    placeholders,
    to_dt,
    to_json,
    to_uuid,
    uid,
    values_rows,
)
from polling.dispatch.spans import occurrence_context
from polling.ownership.stall_bounds import bounded_atomic
from scheduling import conf, keys, tracing
from scheduling.models import JobStatus, MissedPolicy, Team
from scheduling.schedules.recurrence import Rule
from scheduling.sharding.buckets import shard_counts_record
from scheduling.storage.jobinsert import JobBuilder, jobs_insert, new_job_ids

logger = logging.getLogger(__name__)

# An instant the planner reaches later than this after it is "missed" (the missed
# policy decides); a little later fires late. Covers the first instant of a schedule
# created (or resumed) between two poller passes.
MISSED_GRACE = timedelta(seconds=60)
# One schedule's instants per pass (every_seconds=5 over a 600 s plan: 120).
MAX_INSTANTS_PER_SCHEDULE = 1000
# Time one call may spend before the poller goes back to delivering (seconds): short,
# so that a wave of re-planning (schedules created together come due for planning
# together) is spread over several passes instead of holding deliveries back. Planning
# runs SENDLATER_SCHEDULE_AHEAD_SECONDS ahead, so it has time to catch up.
CALL_BUDGET_SECONDS = 0.25
SQLITE_LEDGER_CHUNK = 300  # 3 parameters a row, under SQLite's 999


@dataclass(slots=True)
class Plan:
    """One schedule's pass: the instants to write and where its cursor goes."""

    schedule_id: uuid.UUID
    team_id: int
    shard: int
    epoch: int
    next_at: datetime
    version: int
    new_next: datetime | None
    instants: list[datetime]
    target_kind: str
    target: str
    payload: Any
    metadata: dict[str, str]
    window_seconds: int
    expires_after_seconds: int | None
    flow_control_key: str | None = None  # copied to every occurrence
    request: dict[str, Any] | None = None  # the delivery contract, copied likewise
    payload_json: str = ""  # compact JSON, encoded once for all the schedule's jobs
    # The ledger floor after this plan: min(cursor, now - ledger keep), never lowered.
    floor: datetime | None = None
    trace_context: str | None = None  # the schedule's: each occurrence's trace links to it


# S, the shard indices in use, is the number of lease rows (``0 .. max(S) - 1``);
# each row carries it (column 18) so the poller needs no second statement. Column 19:
# the flow-control key each occurrence carries; 20: the ledger floor; 21: the delivery
# contract (``Job.request``, headers sealed as they are); 22: the schedule's trace context.
DUE_SQL = """
WITH n (indices) AS (SELECT COUNT(*) FROM polling_shardlease)
SELECT s.id, s.team_id, s.cron, s.every_seconds, s.timezone, s.target_kind, s.target,
    s.payload, s.metadata, s.window_seconds, s.expires_after_seconds, s.start_at, s.end_at,
    s.anchor_at, s.missed, s.next_at, s.version, s.shard_hash, n.indices, s.flow_control_key,
    s.ledger_floor, s.request, s.trace_context
FROM scheduling_schedule s, n
WHERE s.paused = %s AND s.next_at IS NOT NULL AND s.next_at <= %s AND n.indices > 0
  AND (s.shard_hash %% n.indices) IN ({shards})
ORDER BY s.next_at LIMIT %s
"""


def schedules_due(*, shards: Sequence[int], until: datetime, limit: int) -> list[tuple[Any, ...]]:
    """Active schedules of ``shards`` whose cursor is at or before ``until``, one statement
    (the idle case of every poller pass). No locks: the write is a compare-and-set
    (``occurrences_write_fenced``)."""
    sql = DUE_SQL.format(shards=placeholders(len(shards)))
    return fetch_all(sql, [False, dt(until), *shards, limit])


def plan(row: Sequence[Any], *, epoch: int, shard: int, now: datetime, until: datetime) -> Plan:
    """The instants of one schedule row up to ``until``, and its next cursor.

    Instants before ``now - MISSED_GRACE`` are missed: ``skip`` drops them,
    ``fire_last`` keeps the latest one (if the cursor had not passed it). Instants
    before the ledger floor are left out: their ledger rows may be pruned, so they
    cannot be told apart from instants already fired (the cursor only comes back
    there after a pause, which goes by the missed policy anyway).
    """
    (sid, team_id, cron, every, tz, kind, target, payload, metadata, window, expires) = row[:11]
    start_at, end_at, anchor_at, missed, next_at, version = (
        to_dt(row[11]),
        to_dt(row[12]),
        to_dt(row[13]),
        row[14],
        to_dt(row[15]),
        int(row[16]),
    )
    assert next_at is not None and anchor_at is not None
    rule = Rule(
        cron=cron,
        every_seconds=every,
        timezone=tz,
        anchor=anchor_at,
        start_at=start_at,
        end_at=end_at,
    )
    instants: list[datetime] = []
    start = next_at
    cutoff = now - MISSED_GRACE
    if next_at < cutoff:
        if missed == MissedPolicy.FIRE_LAST:
            last = rule.latest_before(cutoff)
            if last is not None and last >= next_at:
                instants.append(last)
        start = cutoff
    new_next = None
    for instant in rule.after(start):
        if instant > until or len(instants) >= MAX_INSTANTS_PER_SCHEDULE:
            new_next = instant
            break
        instants.append(instant)
    floor = to_dt(row[20])
    if floor is not None:
        instants = [i for i in instants if i >= floor]
    keep_until = now - conf.schedule_ledger_keep()
    new_floor = min(next_at, keep_until)
    return Plan(
        schedule_id=to_uuid(sid),
        team_id=int(team_id),
        shard=shard,
        epoch=epoch,
        next_at=next_at,
        version=version,
        new_next=new_next,
        instants=instants,
        target_kind=kind,
        target=target,
        payload=to_json(payload),
        payload_json=payload if isinstance(payload, str) else json.dumps(payload),
        metadata=to_json(metadata) or {},
        window_seconds=int(window),
        expires_after_seconds=expires,
        flow_control_key=row[19],
        request=to_json(row[21]),
        floor=new_floor if floor is None else max(floor, new_floor),
        trace_context=row[22],
    )


def schedules_materialize(*, owner: str, leases: Mapping[int, int], now: datetime) -> int:
    """Plan the schedules of the shards in ``leases`` ({shard: my epoch}); return how
    many occurrences became jobs. Bounded by CALL_BUDGET_SECONDS; what is left waits
    for the next call. Never raises for one schedule's bad data: it is logged and left.
    """
    if not leases:
        return 0
    ahead = conf.schedule_ahead()
    batch = conf.schedule_batch()
    owned = sorted(leases)
    # Select a schedule when its cursor comes within ``ahead``; plan it a further
    # ``ahead`` on, so each schedule is touched about once per ``ahead``, not per pass.
    select_until, plan_until = now + ahead, now + 2 * ahead
    written = 0
    started = time.monotonic()
    while time.monotonic() - started < CALL_BUDGET_SECONDS:
        rows = schedules_due(shards=owned, until=select_until, limit=batch)
        plans = []
        for row in rows:
            shard = int(row[17]) % int(row[18])
            try:
                plans.append(plan(row, epoch=leases[shard], shard=shard, now=now, until=plan_until))
            except Exception:
                logger.exception("poller %s: schedule %s: cannot plan", owner, row[0])
        if plans:
            written += occurrences_write_fenced(owner=owner, plans=plans, now=now)
        if len(rows) < batch:
            break
    if written:
        logger.debug("poller %s: %s schedule occurrences materialized", owner, written)
    return written


# --- the fenced write ------------------------------------------------------------

# PostgreSQL: the batch as arrays (one text literal each) instead of a VALUES list of
# 7 parameters a row: psycopg neither parses a 14,000-placeholder statement nor adapts
# each value (2,000 schedules: ~60 ms of Python saved a statement).
_ADVANCE_ARRAYS = (
    "SELECT * FROM unnest(%s::uuid[], %s::int[], %s::bigint[], %s::timestamptz[],"
    " %s::bigint[], %s::timestamptz[], %s::timestamptz[], %s::timestamptz[],"
    " %s::timestamptz[])"
)
# The ledger floor: a plan whose first instant lies before it writes nothing (its
# ledger row may be gone), and the floor moves up to the plan's, never back.
ADVANCE_SQL = (
    """
WITH v (v_id, v_shard, v_epoch, v_next, v_version, v_new_next, v_last, v_first, v_floor)
  AS ({rows})
UPDATE scheduling_schedule AS s SET next_at = v.v_new_next{ts},
    last_occurrence_at = COALESCE(v.v_last{ts}, s.last_occurrence_at), updated_at = %s,
    ledger_floor = CASE WHEN s.ledger_floor IS NULL OR s.ledger_floor < v.v_floor{ts}
        THEN v.v_floor{ts} ELSE s.ledger_floor END
FROM v
WHERE s.id = v.v_id AND s.next_at = v.v_next{ts} AND s.version = v.v_version AND s.paused = %s
  AND (s.ledger_floor IS NULL OR v.v_first IS NULL OR v.v_first{ts} >= s.ledger_floor)
  AND """
    + LEASE_FENCE.format(shard="v.v_shard", epoch="v.v_epoch")
    + """
RETURNING id
"""
)

LEDGER_PG_SQL = """
INSERT INTO scheduling_scheduleoccurrence (job_id, schedule_id, scheduled_for)
SELECT * FROM unnest(%s::text[]::uuid[], %s::text[]::uuid[], %s::text[]::timestamptz[])
ON CONFLICT DO NOTHING RETURNING job_id
"""
LEDGER_SQLITE_SQL = """
INSERT INTO scheduling_scheduleoccurrence (job_id, schedule_id, scheduled_for)
VALUES {rows} ON CONFLICT DO NOTHING RETURNING job_id
"""


def _array(values: Sequence[Any]) -> str:
    """A PostgreSQL array literal of plain tokens (hex ids, ISO times, integers, NULL)."""
    return "{" + ",".join(values) + "}"


def _iso(moment: datetime | None) -> str:
    return "NULL" if moment is None else moment.isoformat()


def _advance(owner: str, plans: Sequence[Plan], now: datetime) -> set[uuid.UUID]:
    """Move each schedule's cursor, compare-and-set and fenced; return the ones moved."""
    if is_postgres():
        params: list[Any] = [
            _array([p.schedule_id.hex for p in plans]),
            _array([str(p.shard) for p in plans]),
            _array([str(p.epoch) for p in plans]),
            _array([_iso(p.next_at) for p in plans]),
            _array([str(p.version) for p in plans]),
            _array([_iso(p.new_next) for p in plans]),
            _array([_iso(max(p.instants)) if p.instants else "NULL" for p in plans]),
            _array([_iso(min(p.instants)) if p.instants else "NULL" for p in plans]),
            _array([_iso(p.floor) for p in plans]),
        ]
        sql = ADVANCE_SQL.format(rows=_ADVANCE_ARRAYS, ts="")
        moved = fetch_all(sql, [*params, dt(now), False, owner, dt(now)])
        return {to_uuid(r[0]) for r in moved}
    rows, params = values_rows(
        [
            (
                uid(p.schedule_id),
                p.shard,
                p.epoch,
                dt(p.next_at),
                p.version,
                dt(p.new_next),
                dt(max(p.instants)) if p.instants else None,
                dt(min(p.instants)) if p.instants else None,
                dt(p.floor),
            )
            for p in plans
        ]
    )
    sql = ADVANCE_SQL.format(rows=f"VALUES {rows}", ts="")
    moved = fetch_all(sql, [*params, dt(now), False, owner, dt(now)])
    return {to_uuid(r[0]) for r in moved}


def _ledger_insert(entries: Sequence[tuple[uuid.UUID, uuid.UUID, datetime]]) -> set[uuid.UUID]:
    """Insert ledger rows ``(job id, schedule id, instant)``; return the job ids whose
    row this statement inserted (the others' instants were materialized before)."""
    if not entries:
        return set()
    if is_postgres():
        rows = fetch_all(
            LEDGER_PG_SQL,
            [
                _array([e[0].hex for e in entries]),
                _array([e[1].hex for e in entries]),
                _array([e[2].isoformat() for e in entries]),
            ],
        )
        return {to_uuid(r[0]) for r in rows}
    inserted: set[uuid.UUID] = set()
    for i in range(0, len(entries), SQLITE_LEDGER_CHUNK):
        chunk = entries[i : i + SQLITE_LEDGER_CHUNK]
        rows_sql, params = values_rows([(uid(j), uid(s), dt(t)) for j, s, t in chunk])
        inserted |= {
            to_uuid(r[0]) for r in fetch_all(LEDGER_SQLITE_SQL.format(rows=rows_sql), params)
        }
    return inserted


def occurrences_write_fenced(*, owner: str, plans: Sequence[Plan], now: datetime) -> int:
    """Write ``plans`` in one transaction: cursors (fenced compare-and-set), ledger rows
    (unique per schedule and instant), then one job per new ledger row. Return the
    number of jobs written.

    Lock: the moved schedule rows' row locks until COMMIT (an API change to one of
    them waits, then sees its jobs); ledger rows by their unique key. A schedule whose
    cursor or version moved, that was paused, or whose shard's lease I no longer hold
    at this epoch, writes nothing.
    """
    width = conf.bucket_seconds()
    opened = keys.bucket_of(now, width)
    with bounded_atomic():
        moved = _advance(owner, plans, now)
        if not moved:
            return 0
        won = [p for p in plans if p.schedule_id in moved and p.instants]
        entries: list[tuple[uuid.UUID, uuid.UUID, datetime]] = []
        owners: list[Plan] = []
        ids = new_job_ids(sum(len(p.instants) for p in won))
        k = 0
        for p in won:
            for instant in p.instants:
                entries.append((ids[k], p.schedule_id, instant))
                owners.append(p)
                k += 1
        fresh = _ledger_insert(entries)
        failpoint("schedules_after_ledger")  # fault tests: die with the transaction open
        rows = [(e, p) for e, p in zip(entries, owners, strict=True) if e[0] in fresh]
        if not rows:
            return 0
        dues = [
            instant + keys.spread_offset(job_id, p.window_seconds) if p.window_seconds else instant
            for (job_id, _, instant), p in rows
        ]
        places = [max(keys.bucket_of(due, width), opened) for due in dues]
        counts = shard_counts_record(set(places))
        builders: dict[int, JobBuilder] = {}
        traced = tracing.TRACER is not None

        def build():  # type: ignore[no-untyped-def]
            for ((job_id, schedule_id, instant), p), due, place in zip(
                rows, dues, places, strict=True
            ):
                builder = builders.get(p.team_id)
                if builder is None:
                    builder = builders[p.team_id] = JobBuilder(
                        team=Team(pk=p.team_id),
                        status=JobStatus.PENDING,
                        created_at=now,
                        updated_at=now,
                        idempotency_key=None,
                        request_fingerprint="",
                    )
                expires = p.expires_after_seconds
                yield builder.build(
                    {
                        "id": job_id,
                        "due_at": due,
                        "bucket": place,
                        "shard": keys.shard_of(job_id, counts[place]),
                        "target_kind": p.target_kind,
                        "target": p.target,
                        "payload": p.payload,
                        "_payload_json": p.payload_json,
                        "metadata": p.metadata,
                        "window_seconds": p.window_seconds,
                        "expires_at": instant + timedelta(seconds=expires)
                        if expires is not None
                        else None,
                        "schedule_id": schedule_id,
                        "scheduled_for": instant,
                        "flow_control_key": p.flow_control_key,
                        "request": p.request,
                        "trace_context": occurrence_context(
                            p.trace_context, schedule_id=schedule_id, scheduled_for=instant
                        )
                        if traced and p.trace_context
                        else None,
                    }
                )

        jobs_insert(build())
        failpoint("schedules_before_commit")
    return len(rows)
