"""Delivery attempts: one row per try, written with the batch's write-back.

One COPY per batch on PostgreSQL (a multi-row INSERT, chunked under SQLite's
parameter limit, elsewhere), from tuples, in the write-back's transaction, for
the rows the fenced write-back actually changed: a poller that lost its lease
records nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from uuid import UUID

from polling.claims import Result
from polling.dispatch.base import ClaimedJob, Outcome, answered_in_order
from polling.sqlutil import dt, is_postgres, rowcount, uid, values_rows
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


def attempts_record(
    *,
    jobs: Sequence[ClaimedJob],
    outcomes: Sequence[Outcome],
    results: Sequence[Result],
    written: Collection[UUID],
    poller: str,
    now: datetime,
) -> int:
    """Insert one attempt row per written result; return how many were inserted."""
    if not written:
        return 0
    rows = []
    for job, outcome, result in _triples(jobs, outcomes, results, written):
        if not result.counted:
            continue  # handed back untried: no attempt was made
        started = outcome.started_at if outcome and outcome.started_at else now
        duration = outcome.duration_seconds if outcome else None
        rows.append(
            (
                result.job_id,
                job.attempt,
                started,
                round(duration * 1000) if duration is not None else None,
                _RESULT[result.status],
                outcome.status_code if outcome else None,
                (outcome.error if outcome else result.last_error)[:_ERROR_CHARS],
                poller,
            )
        )
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


def _triples(
    jobs: Sequence[ClaimedJob],
    outcomes: Sequence[Outcome],
    results: Sequence[Result],
    written: Collection[UUID],
) -> Iterable[tuple[ClaimedJob, Outcome | None, Result]]:
    """(job, its outcome or None if it expired unsent, result) for each written result.

    The usual batch (nothing expired, every row written, outcomes in the jobs'
    order, all delivered) lines up: a zip checked by identity, no UUID hashing.
    """
    if (
        len(written) == len(results)
        and answered_in_order(jobs, outcomes)
        and answered_in_order(jobs, results)
    ):
        return zip(jobs, outcomes, results, strict=True)
    job_of = {j.id: j for j in jobs}
    by_outcome = {o.job_id: o for o in outcomes}
    return ((job_of[r.job_id], by_outcome.get(r.job_id), r) for r in results if r.job_id in written)
