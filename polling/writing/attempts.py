"""Attempt history: one row per failed try, written with the group's write-back.

A successful attempt writes no row: the job keeps its last attempt inline
(``last_attempt_at``, ``last_attempt_ms``, ``last_status_code``; see
``polling.writing.writeback``), and ``GET /api/v1/jobs/{id}/attempts`` adds it to the
rows (``scheduling.jobs.selectors.delivery_attempt_list``). Retries, dead letters and
expiries are the history that matters, so they are rows: one COPY per group on
PostgreSQL (a multi-row INSERT, chunked under SQLite's parameter limit,
elsewhere), in the write-back's transaction, for the rows the fenced write-back
actually changed: a poller that lost its lease records nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from uuid import UUID

from polling.common.sql import dt, is_postgres, rowcount, uid, values_rows
from polling.writing.writeback import Result
from scheduling.storage.dbcopy import copy_rows

COLUMNS = "job_id, attempt, started_at, duration_ms, result, status_code, error, poller"
COPY_SQL = f"COPY scheduling_deliveryattempt ({COLUMNS}) FROM STDIN (FORMAT BINARY)"
# Each column's type as psycopg packs it (text stands in for varchar).
COPY_TYPES = ("uuid", "int4", "timestamptz", "int4", "text", "int2", "text", "text")

INSERT_SQL = f"INSERT INTO scheduling_deliveryattempt ({COLUMNS}) VALUES {{rows}}"  # noqa: S608
_CHUNK_ROWS = 2000
_ERROR_CHARS = 300
# Write-back status -> what the attempt came to.
_RESULT = {"delivered": "delivered", "pending": "retry", "dead": "dead", "expired": "expired"}
# What is recorded: not a success, nor a topic job's fan-out (its children are its tries).
_FAILED = frozenset({"pending", "dead", "expired"})


def attempts_record(
    *, results: Sequence[Result], written: Collection[UUID], poller: str, now: datetime
) -> int:
    """Insert a row per written, counted, unsuccessful result; return how many."""
    rows = [
        (
            r.job_id,
            r.attempt,
            r.started_at or now,
            r.duration_ms,
            _RESULT[r.status],
            r.status_code,
            r.last_error[:_ERROR_CHARS],
            poller,
        )
        for r in results
        if r.status in _FAILED and r.counted and r.job_id in written
    ]
    if not rows:
        return 0
    if is_postgres():  # binary COPY takes UUIDs, datetimes and ints as they are
        return copy_rows(COPY_SQL, rows, types=COPY_TYPES)
    rows = [(uid(job_id), attempt, dt(started), *rest) for job_id, attempt, started, *rest in rows]
    for start in range(0, len(rows), _CHUNK_ROWS):
        chunk = rows[start : start + _CHUNK_ROWS]
        placeholders, params = values_rows(chunk)
        rowcount(INSERT_SQL.format(rows=placeholders), params)
    return len(rows)
