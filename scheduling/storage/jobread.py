"""One job row by id alone: a named, prepared statement on the primary key.

The partitioned table's primary key is ``(id, bucket)``; a read that knows only the
id probes that index in every partition. Filtering by team too would let the planner
pick ``job_team_due`` instead (it did, on fresh partitions whose statistics said
"empty", reading every index entry of the team), so the statement names the id only
and the caller checks the team.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from functools import cache
from typing import Any

from django.db import connection

from scheduling.models import Job
from scheduling.storage.prepared import prepared_fetchone

_FIELDS = Job._meta.concrete_fields
JOB_BY_ID_SQL = "SELECT {columns} FROM {table} WHERE {pk} = %s LIMIT 1"


def job_columns(alias: str = "") -> str:
    """The job table's columns, in ``job_from_row``'s order (qualified by ``alias``)."""
    quote = connection.ops.quote_name
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + quote(f.column) for f in _FIELDS)


def job_table() -> str:
    return connection.ops.quote_name(Job._meta.db_table)


def job_pk() -> str:
    return connection.ops.quote_name(Job._meta.pk.column)


@cache
def _sql() -> str:
    return JOB_BY_ID_SQL.format(columns=job_columns(), table=job_table(), pk=job_pk())


def job_id_param(job_id: uuid.UUID) -> Any:
    """``job_id`` as the database takes it."""
    return Job._meta.pk.get_db_prep_value(job_id, connection)


def job_row_get(job_id: uuid.UUID) -> Job | None:
    """The job ``job_id`` (any team's), or None."""
    row = prepared_fetchone(_sql(), [job_id_param(job_id)])
    return None if row is None else job_from_row(row)


def job_from_row(row: Sequence[Any]) -> Job:
    """The model for a row of ``job_columns()``, as a queryset would build it."""
    return Job.from_db(connection.alias, [f.attname for f in _FIELDS], _converted(row))


def _converted(row: Sequence[Any]) -> list[Any]:
    # What the ORM's compiler applies to each column (SQLite's text datetimes and
    # UUIDs, JSON decoding), so the model matches one read through a queryset.
    values = list(row)
    for i, col, converters in _converters():
        value = values[i]
        for converter in converters:
            value = converter(value, col, connection)
        values[i] = value
    return values


@cache
def _converters() -> list[tuple[int, Any, list[Any]]]:
    table = Job._meta.db_table
    found = []
    for i, field in enumerate(_FIELDS):
        col = field.get_col(table)
        converters = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        if converters:
            found.append((i, col, converters))
    return found
