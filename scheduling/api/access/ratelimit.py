"""Request budgets counted with one atomic operation per request, shared by every worker.

Two stores, chosen by ``SENDLATER_THROTTLE_STORE``:

- ``database`` (the default): one ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``
  on ``scheduling_throttlecounter`` (PostgreSQL and SQLite alike): exact across
  workers and machines that share the database, one statement, no table counts.
- ``cache``: the ``default`` cache. With Redis (``CACHE_URL=redis://...``) one
  ``INCR`` (plus one ``EXPIRE`` when a window's first request creates the key):
  exact across workers and machines. Any other cache backend counts with ``add``
  then ``incr``, exact only where that backend's ``incr`` is atomic.

Windows are fixed: a budget of N per period counts the requests whose time falls in
``[k * period, (k + 1) * period)``; a client can spend up to 2N across a boundary.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime

from django.conf import settings
from django.core.cache import caches
from django.db import connection

from scheduling.models import Job
from scheduling.storage import jobread
from scheduling.storage.prepared import prepared_fetchone

_COUNT_SQL = """
INSERT INTO scheduling_throttlecounter (key, window_end, count) VALUES (%s, %s, 1)
ON CONFLICT (key) DO UPDATE SET
    count = CASE WHEN scheduling_throttlecounter.window_end = excluded.window_end
                 THEN scheduling_throttlecounter.count + 1 ELSE 1 END,
    window_end = excluded.window_end
RETURNING count
"""
# PostgreSQL also answers with its clock, so a create needs no statement of its own
# to read it (scheduling.sharding.clock.db_now reads the same clock).
_COUNT_SQL_WITH_CLOCK = _COUNT_SQL.replace(
    "RETURNING count", "RETURNING count, statement_timestamp()"
)

# The count, and the job by its primary key alone (scheduling.storage.jobread).
COUNT_AND_READ_SQL = (
    "WITH spent AS ({count}) SELECT spent.count, {columns} "
    "FROM spent LEFT JOIN {table} job ON job.{pk} = %s LIMIT 1"
)


def count_request(key: str, window_end: int, period: int) -> tuple[int, datetime | None]:
    """Count one request against ``key`` in the window ending at ``window_end``;
    return the window's count including it, and the database's clock (UTC) when
    the count was made there on PostgreSQL (None otherwise)."""
    if settings.SENDLATER_THROTTLE_STORE == "cache":
        return _count_in_cache(key, window_end, period), None
    if connection.vendor != "postgresql":
        (count,) = prepared_fetchone(_COUNT_SQL, [key, window_end])  # type: ignore[misc]
        return int(count), None
    count, now = prepared_fetchone(_COUNT_SQL_WITH_CLOCK, [key, window_end])  # type: ignore[misc]
    return int(count), now.astimezone(UTC)


def counted_reads() -> bool:
    """Whether ``count_request_and_read_job`` can count and read in one statement: a
    data-modifying CTE, which PostgreSQL has and SQLite has not. The same condition
    lets a create send its count and its INSERT in one round trip (``counting``,
    ``within_budget``)."""
    return settings.SENDLATER_THROTTLE_STORE == "database" and connection.vendor == "postgresql"


def counting(key: str, window_end: int) -> tuple[str, list[object]]:
    """``count_request``'s statement on PostgreSQL with its parameters, to send in a
    pipeline (``prepared.prepared_pipeline``); its row is (count, the clock)."""
    return _COUNT_SQL_WITH_CLOCK, [key, window_end]


def within_budget(key: str, window_end: int, num_requests: int) -> tuple[str, list[object]]:
    """A condition (SQL, parameters) that holds while the window's count is within
    ``num_requests``: a statement sent after a request's count, in a transaction of
    its own, writes only for a request that was allowed. Counts only grow within a
    window, so a request over the budget never passes; one within it may not pass
    either, when others have spent the rest meanwhile (or the window has ended)."""
    return _WITHIN_BUDGET_SQL, [key, window_end, num_requests]


_WITHIN_BUDGET_SQL = (
    "(SELECT count FROM scheduling_throttlecounter WHERE key = %s AND window_end = %s) <= %s"
)


def count_request_and_read_job(key: str, window_end: int, job_id: object) -> tuple[int, Job | None]:
    """``count_request`` and ``jobread.job_row_get(job_id)`` in one statement (one round
    trip for a single-job read); only where ``counted_reads()``.

    The count is made whether or not the job exists (a LEFT JOIN from the counter's
    row), as when the two run one after the other.
    """
    count, *row = prepared_fetchone(  # type: ignore[misc]
        _count_and_read_sql(), [key, window_end, jobread.job_id_param(job_id)]
    )
    return int(count), None if row[0] is None else jobread.job_from_row(row)


@functools.cache
def _count_and_read_sql() -> str:
    return COUNT_AND_READ_SQL.format(
        count=_COUNT_SQL,
        columns=jobread.job_columns("job"),
        table=jobread.job_table(),
        pk=jobread.job_pk(),
    )


def _count_in_cache(key: str, window_end: int, period: int) -> int:
    cache = caches["default"]
    windowed = f"{key}:{window_end}"
    redis = _redis_client(cache, windowed)
    if redis is not None:
        count = int(redis.incr(cache.make_and_validate_key(windowed)))
        if count == 1:
            redis.expire(cache.make_and_validate_key(windowed), period + 1)
        return count
    if cache.add(windowed, 1, period + 1):
        return 1
    try:
        return int(cache.incr(windowed))
    except ValueError:  # expired between add and incr: a new window
        cache.set(windowed, 1, period + 1)
        return 1


def _redis_client(cache: object, key: str) -> object | None:
    """The redis-py client behind Django's RedisCache, or None for other backends."""
    inner = getattr(cache, "_cache", None)
    get_client = getattr(inner, "get_client", None)
    if get_client is None or type(cache).__name__ != "RedisCache":
        return None
    return get_client(key, write=True)
