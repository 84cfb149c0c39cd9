"""Small adapters between raw SQL and Python values, for PostgreSQL and SQLite.

Raw statements bypass model fields, so values are prepared here the way the
fields would: SQLite keeps datetimes as naive UTC text and UUIDs as 32 hex digits.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from django.db import DatabaseError, connection
from django.utils.dateparse import parse_datetime

from scheduling.keys import EPOCH


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def dt(value: datetime | None) -> Any:
    """A datetime as the database stores it (naive UTC text on SQLite)."""
    if value is None:
        return None
    return connection.ops.adapt_datetimefield_value(value)


def floor() -> Any:
    """The lower bound used for a checkpoint that drained nothing yet."""
    return dt(EPOCH)


def uid(value: UUID) -> Any:
    return value if is_postgres() else value.hex


def to_dt(value: Any) -> datetime | None:
    """A datetime read back from a raw cursor, timezone-aware in UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            raise ValueError(f"not a datetime: {value!r}")
        value = parsed
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def to_uuid(value: Any) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))


def to_json(value: Any) -> Any:
    """A JSON value read back as text (Django reads jsonb as text), decoded."""
    if value == "{}":  # most metadata: skip the decoder
        return {}
    return json.loads(value) if isinstance(value, str | bytes | bytearray) else value


def fetch_all(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Run one statement; return its rows (RETURNING included), or [] if it has none."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []


def rowcount(sql: str, params: Sequence[Any]) -> int:
    """Run one statement; return how many rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def placeholders(count: int) -> str:
    """``%s, %s, ...`` for an ``IN (...)`` list."""
    return ", ".join(["%s"] * count)


def id_in(ids: Sequence[UUID]) -> tuple[str, list[Any]]:
    """``column {fragment}`` matching ``ids``, and its parameters.

    PostgreSQL: ``= ANY(%s)`` with one ``uuid[]`` parameter, so the statement's
    text is the same whatever the batch size (psycopg converts it once instead of
    parsing a 1,000-placeholder string per batch) and the array is still a
    constant the planner probes the primary key with. SQLite: ``IN (%s, ...)``.
    """
    if is_postgres():
        return "= ANY(%s)", [list(ids)]
    return f"IN ({placeholders(len(ids))})", [uid(value) for value in ids]


# A lease row of shard ``{shard}`` held by owner ``%s`` at epoch ``{epoch}`` and not
# expired: the fence of every statement that writes under a lease.
LEASE_FENCE = (
    "EXISTS (SELECT 1 FROM polling_shardlease l WHERE l.shard = {shard} AND l.owner = %s"
    " AND l.epoch = {epoch} AND l.expires_at > %s)"
)


def values_rows(rows: Sequence[Sequence[Any]]) -> tuple[str, list[Any]]:
    """``(%s, %s), (%s, %s)`` and the flat parameters for a VALUES list."""
    width = len(rows[0])
    row = "(" + ", ".join(["%s"] * width) + ")"
    return ", ".join([row] * len(rows)), [value for r in rows for value in r]


def skip_locked() -> str:
    """Row locking for a claim subquery: only PostgreSQL has SKIP LOCKED.

    SQLite serialises writers (IMMEDIATE transactions, one writer at a time), so a
    single UPDATE there is already atomic against other pollers.
    """
    return "FOR UPDATE OF j SKIP LOCKED" if is_postgres() else ""


SERIALIZATION_FAILURE = "40001"
SERIALIZATION_RETRIES = 3


def is_serialization_failure(error: BaseException) -> bool:
    """True for SQLSTATE 40001, e.g. locking a row moved to another partition meanwhile."""
    cause = error.__cause__ or error
    return getattr(cause, "sqlstate", None) == SERIALIZATION_FAILURE


def retry_serialization(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """``fetch_all``, retried on a serialization failure when not inside a transaction.

    On PostgreSQL, ``FOR UPDATE`` on a row that a concurrent UPDATE moved to another
    partition (a reschedule or retry changing its bucket) raises 40001 instead of
    skipping it. Run alone in autocommit, the statement changed nothing and can
    simply run again; inside a transaction the caller must roll back, so it raises.
    """
    for attempt in range(SERIALIZATION_RETRIES + 1):
        try:
            return fetch_all(sql, params)
        except DatabaseError as error:
            if (
                not is_serialization_failure(error)
                or connection.in_atomic_block
                or attempt == SERIALIZATION_RETRIES
            ):
                raise
    raise AssertionError("unreachable")
