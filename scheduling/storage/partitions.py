"""PostgreSQL partitions of the jobs table: list, create ahead, and move strays out.

On PostgreSQL ``scheduling_job`` is ``PARTITION BY RANGE (bucket)`` (migration
0005): one partition per ``SENDLATER_PARTITION_DAYS`` days, aligned on the Unix
epoch, named ``scheduling_job_pYYYYMMDD`` after their first day, plus a DEFAULT
partition that catches rows no partition covers. Retention lives in
``scheduling.storage.retention``. SQLite keeps a plain table: every function here is a
no-op there.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import OperationalError, connection, transaction

from scheduling import conf, keys
from scheduling.storage.dberrors import is_lock_timeout

PARENT = "scheduling_job"
DEFAULT = "scheduling_job_default"
# Serialises partition DDL between pollers and the command (pg_advisory_xact_lock).
DDL_LOCK_KEY = 0x5E6D_1A7E_0001
# A partition's DDL waits at most this long for a lock (the DDL advisory lock, the
# DEFAULT partition): queued behind a long reader it would block every statement
# queued behind it, so it gives way and is retried (next tick, or by the command).
LOCK_TIMEOUT_MS = 500
_BOUND = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    start: datetime | None  # None: the DEFAULT partition
    end: datetime | None
    rows_estimate: int  # pg_class.reltuples; -1 until the partition is analysed

    @property
    def is_default(self) -> bool:
        return self.start is None


def is_partitioned() -> bool:
    """True on PostgreSQL, where migration 0005 made the jobs table partitioned."""
    return connection.vendor == "postgresql"


def bounds_of(instant: datetime, days: int | None = None) -> tuple[datetime, datetime]:
    """The partition range ``[start, end)`` that holds ``instant``."""
    width = timedelta(days=days or conf.partition_days())
    start = keys.EPOCH + ((instant - keys.EPOCH) // width) * width
    return start, start + width


def name_of(start: datetime) -> str:
    return f"{PARENT}_p{start.astimezone(UTC):%Y%m%d}"


def _parse_bound(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace(" ", "T"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)


LIST_SQL = """
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), c.reltuples::bigint
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'scheduling_job'::regclass
"""


def partitions_list() -> list[Partition]:
    """Every partition, oldest first, the DEFAULT partition last. A catalog read, no locks."""
    if not is_partitioned():
        return []
    with connection.cursor() as cursor:
        cursor.execute(LIST_SQL)
        rows = cursor.fetchall()
    found: list[Partition] = []
    for name, bound, estimate in rows:
        match = _BOUND.search(bound or "")
        if match is None:
            found.append(Partition(name, None, None, int(estimate)))
        else:
            start, end = (_parse_bound(g) for g in match.groups())
            found.append(Partition(name, start, end, int(estimate)))
    found.sort(key=lambda p: (p.start is None, p.start or keys.EPOCH))
    return found


# Each job row is written three times (insert, claim, write-back) within a day:
# vacuum a partition after 1% dead rows, not 20%, and leave room for HOT updates.
PARTITION_STORAGE = (
    "autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.05,"
    " autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 2000,"
    " fillfactor = 90"
)
CREATE_SQL = (
    "CREATE TABLE {name} (LIKE scheduling_job INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
    f" WITH ({PARTITION_STORAGE})"
)
MOVE_OUT_OF_DEFAULT_SQL = """
WITH moved AS (
    DELETE FROM scheduling_job_default WHERE bucket >= %s AND bucket < %s RETURNING *
) INSERT INTO {name} SELECT * FROM moved
"""
ATTACH_SQL = "ALTER TABLE scheduling_job ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)"


class PartitionBusy(Exception):
    """A partition's DDL gave way: a lock it needs was held past ``LOCK_TIMEOUT_MS``."""


def partition_create(
    start: datetime, end: datetime, *, lock_timeout_ms: int = LOCK_TIMEOUT_MS
) -> tuple[str, int]:
    """Create the partition ``[start, end)``; return its name and the rows moved into it.

    One short transaction: create a plain table shaped like the parent, move the
    rows of that range out of the DEFAULT partition into it, attach it (which builds
    its indexes). Lock: the DDL advisory lock; ATTACH takes SHARE UPDATE EXCLUSIVE
    on the parent (claims and inserts go on; ``CREATE TABLE ... PARTITION OF`` would
    take ACCESS EXCLUSIVE on it) and ACCESS EXCLUSIVE on the DEFAULT partition for
    the rest of the transaction, taken first to avoid an upgrade. Every lock wait is
    bounded by ``lock_timeout_ms``: past it the transaction rolls back and
    ``PartitionBusy`` is raised, so a queued ACCESS EXCLUSIVE request never holds up
    the statements behind it for long.
    """
    name = name_of(start)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('lock_timeout')")
            previous = cursor.fetchone()[0]
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{lock_timeout_ms}ms"])
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [DDL_LOCK_KEY])
            cursor.execute("SELECT to_regclass(%s)", [name])
            if cursor.fetchone()[0] is not None:
                moved = 0
            else:
                cursor.execute("LOCK TABLE scheduling_job_default IN ACCESS EXCLUSIVE MODE")
                cursor.execute(CREATE_SQL.format(name=name))
                cursor.execute(MOVE_OUT_OF_DEFAULT_SQL.format(name=name), [start, end])
                moved = cursor.rowcount
                cursor.execute(ATTACH_SQL.format(name=name), [start, end])
            # Inside a caller's transaction SET LOCAL would outlive this block.
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous])
    except OperationalError as error:
        if is_lock_timeout(error):
            raise PartitionBusy(f"{name}: a lock was held past {lock_timeout_ms} ms") from error
        raise
    return name, moved


def partitions_missing(*, now: datetime, days: int, back_days: int = 1) -> list[datetime]:
    """Starts of the partitions that should cover ``[now - back_days, now + days]`` and
    don't, nearest to ``now`` first (the one holding now, then ahead, then behind)."""
    covered = [(p.start, p.end) for p in partitions_list() if not p.is_default]
    start, _ = bounds_of(now - timedelta(days=back_days))
    current, _ = bounds_of(now)
    last = now + timedelta(days=days)
    missing: list[datetime] = []
    while start <= last:
        _, end = bounds_of(start)
        if not any(s < end and start < e for s, e in covered):  # type: ignore[operator]
            missing.append(start)
        start = end
    # Nearest first; on a tie the partition ahead wins (it takes new writes).
    return sorted(missing, key=lambda s: (abs(s - current), s < current))


@dataclass(slots=True)
class EnsureReport:
    created: list[tuple[str, int]] = field(default_factory=list)  # (name, rows moved)
    remaining: int = 0  # still missing when the step stopped (budget, or busy)
    busy: bool = False  # a partition gave way to a lock (retried next step)


def partitions_ensure_step(
    *,
    now: datetime,
    days: int | None = None,
    max_count: int | None = None,
    budget_seconds: float | None = None,
) -> EnsureReport:
    """Create missing partitions nearest first, one transaction each, within a budget.

    Stops after ``max_count`` partitions, once ``budget_seconds`` of monotonic
    time are spent (at least one is always tried), or at the first partition
    whose lock wait timed out; ``remaining`` says how many are still missing, so
    a caller with other duties (the poller keeping its leases) comes back soon.
    Cheap when nothing is missing: one catalog read.
    """
    report = EnsureReport()
    if not is_partitioned():
        return report
    days = conf.partition_ahead_days() if days is None else days
    missing = partitions_missing(now=now, days=days)
    t0 = time.monotonic()
    for i, start in enumerate(missing):
        spent = time.monotonic() - t0
        over_count = max_count is not None and i >= max_count
        over_time = budget_seconds is not None and i > 0 and spent >= budget_seconds
        if over_count or over_time:
            report.remaining = len(missing) - i
            break
        try:
            report.created.append(partition_create(start, bounds_of(start)[1]))
        except PartitionBusy:
            report.busy = True
            report.remaining = len(missing) - i
            break
    return report


def partitions_ensure(
    *, now: datetime, days: int | None = None, busy_retries: int = 20
) -> list[tuple[str, int]]:
    """Create every missing partition up to ``now + days``; return ``(name, rows moved)``.

    Cheap when nothing is missing: one catalog read. ``days`` defaults to the
    maximum scheduling horizon plus two days, so the DEFAULT partition only ever
    catches strays. Each partition is created in its own short transaction,
    nearest first; one that gives way to a lock is retried after a short pause, up
    to ``busy_retries`` times in all (then ``PartitionBusy`` propagates).
    """
    created: list[tuple[str, int]] = []
    busy = 0
    while True:
        report = partitions_ensure_step(now=now, days=days)
        created += report.created
        if not report.busy:
            return created
        busy += 1
        if busy > busy_retries:
            raise PartitionBusy(f"partitions still busy after {busy_retries} retries")
        time.sleep(min(2.0, 0.1 * busy))
