"""Jobs in flight: read by a shard's owner and handed to its sinks, not yet written back.

There is no per-row claim. A shard has one owner at a time (its lease), which reads
the shard's due pending rows with a plain read and records one ``InFlightBatch``
per batch it hands to its sinks; each job is written once, with its outcome.
Cancel, reschedule and bulk cancel ask here whether a pending job is in flight,
and answer 409 for those, as they did for a claimed row.

The lock order that makes the check exact (docs/pollers.md, "In flight"):

- a poller takes a batch in one transaction: the shard's window lock in exclusive
  mode (``polling.reading.take.batch_take``), then the read, then the batch row;
- a cancel or reschedule holds the job's row lock (``SELECT ... FOR UPDATE``), then
  takes the shard's window lock in shared mode, then looks for the id in the
  shard's batches, then changes the row, all in one transaction;
- a bulk cancel takes the shared window lock of every shard index first (in
  ascending order), then reads the ids in flight and updates the rest.

A poller never holds a window lock while it waits for a row lock (its read locks
no row), so the orders cannot deadlock. Whichever side gets the window lock first
wins: the cancel commits before the poller's read begins (its snapshot is taken
after the lock), or the poller's batch row is committed before the cancel looks.

On PostgreSQL the window lock is a transaction-level advisory lock on
``(WINDOW_LOCK_CLASS, shard)``: no table write, released at commit, and safe under
pgbouncer's transaction pooling. SQLite serialises writers (IMMEDIATE
transactions), which already orders the two.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence

from django.db import connection

from scheduling.errors import JobNotPending
from scheduling.models import Job
from scheduling.sharding.buckets import shard_count_max

# The advisory-lock namespace of shard windows (the first of the two int4 keys).
WINDOW_LOCK_CLASS = 0x534C0001


class JobInFlight(JobNotPending):
    """The job is being delivered: its outcome is not written yet (409 ``not_pending``,
    as a claimed job answered before the lease became the lock)."""


def ids_text(ids: Iterable[uuid.UUID]) -> str:
    """A batch's ids as stored in ``InFlightBatch.job_ids``: hex, comma-separated."""
    return ",".join([value.hex for value in ids])


def ids_parse(text: str) -> list[uuid.UUID]:
    return [uuid.UUID(hex=value) for value in text.split(",") if value]


def _is_postgres() -> bool:
    return connection.vendor == "postgresql"


def window_lock_shared(shards: Sequence[int]) -> None:
    """Wait for batches being taken on ``shards`` and keep new ones out until commit.

    Call inside a transaction. Locks are taken in ascending shard order.
    """
    if not _is_postgres() or not shards:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock_shared(%s, s) FROM unnest(%s::int[]) AS s ORDER BY s",
            [WINDOW_LOCK_CLASS, sorted(set(shards))],
        )


IN_FLIGHT_SQL = {
    "postgresql": (
        "SELECT 1 FROM scheduling_inflightbatch WHERE shard = %s AND strpos(job_ids, %s) > 0"
        " LIMIT 1"
    ),
    "sqlite": (
        "SELECT 1 FROM scheduling_inflightbatch WHERE shard = %s AND instr(job_ids, %s) > 0 LIMIT 1"
    ),
}


def job_in_flight(job: Job) -> bool:
    """Whether ``job`` is in one of its shard's batches in flight (a read, no lock)."""
    with connection.cursor() as cursor:
        cursor.execute(IN_FLIGHT_SQL[connection.vendor], [job.shard, job.id.hex])
        return cursor.fetchone() is not None


def job_in_flight_refuse(job: Job) -> None:
    """Raise JobInFlight if ``job`` is in flight; the caller holds its row lock.

    Takes the shard's window lock (shared) first, so no poller can be between its
    read and its batch row: the answer holds until the caller commits.
    """
    window_lock_shared([job.shard])
    if job_in_flight(job):
        raise JobInFlight(
            f"job {job.id} is being delivered; it can't be changed until its outcome is "
            "written (seconds at most). Read it again to see the outcome.",
            field="status",
        )


def in_flight_frozen() -> set[uuid.UUID]:
    """Every job id in flight, with every shard's window lock held (shared) until commit.

    For statements that change many pending jobs at once (bulk cancel, a schedule's
    pause): exclude these ids and no poller can take another batch meanwhile.
    """
    window_lock_shared(range(shard_count_max()))
    with connection.cursor() as cursor:
        cursor.execute("SELECT job_ids FROM scheduling_inflightbatch")
        rows = cursor.fetchall()
    found: set[uuid.UUID] = set()
    for (text,) in rows:
        found.update(ids_parse(text))
    return found


def id_not_in(column: str, ids: Iterable[uuid.UUID]) -> tuple[str, list[object]]:
    """``AND column NOT IN ids`` for raw SQL, as one parameter whatever the count."""
    wanted = [value.hex for value in ids]
    if not wanted:
        return "", []
    if _is_postgres():
        return f" AND NOT ({column} = ANY(%s::uuid[]))", ["{" + ",".join(wanted) + "}"]
    return f" AND {column} NOT IN (SELECT value FROM json_each(%s))", [json.dumps(wanted)]  # noqa: S608


def in_flight_by_shard() -> dict[int, int]:
    """Jobs in flight per shard, for the console, ``/metrics`` and ``manage.py lag``.

    Counted by batch: a batch's jobs stay counted until its last one is written
    back, so the figure is an upper bound by at most a batch per shard.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT shard, SUM(job_count) FROM scheduling_inflightbatch GROUP BY shard")
        return {int(shard): int(count) for shard, count in cursor.fetchall()}
