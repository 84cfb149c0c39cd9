"""A cursor whose statements PostgreSQL parses and plans once per connection.

Django runs every statement with client-side binding and no prepared statements, so
PostgreSQL plans each one again. For the per-request statements of the single-job
API that planning is most of their cost: a read by id on the partitioned jobs table
plans every partition each time (~0.4 ms of server CPU with 6 partitions, ~60 ms
with the default ~400; prepared: ~0.2 and ~2 ms, docs/performance.md). Pooled
connections live on, so a worker prepares a statement once per connection.

SQLite (no server planning to save), and PostgreSQL with
``SENDLATER_DB_PREPARED_STATEMENTS=false`` (a pooler that cannot keep prepared
statements, e.g. PgBouncer before 1.21), get Django's ordinary cursor. Statements
keep Django's ``%s`` placeholders either way and run through Django's cursor wrapper,
so errors, ``CaptureQueriesContext`` and execute wrappers see them as usual.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.backends.utils import CursorWrapper


def prepared_cursor() -> CursorWrapper:
    """A cursor on the default connection whose ``execute`` prepares the statement."""
    if connection.vendor != "postgresql" or not settings.SENDLATER_DB_PREPARED_STATEMENTS:
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        return connection._prepare_cursor(_preparing_cursor_class()(connection.connection))


@cache
def _preparing_cursor_class() -> type:
    from django.db.backends.postgresql.base import ServerBindingCursor  # psycopg 3 only

    class PreparingCursor(ServerBindingCursor):  # type: ignore[misc,valid-type]
        # Django turns psycopg's automatic preparation off (prepare_threshold=None);
        # ask for it per statement, on this cursor only.
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            kwargs.setdefault("prepare", True)
            return super().execute(query, params, **kwargs)

    return PreparingCursor
