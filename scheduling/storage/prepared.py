"""Statements PostgreSQL parses and plans once per connection, sent with little Python.

Django runs every statement with client-side binding and no prepared statements, so
PostgreSQL plans each one again. For the per-request statements of the single-job
API that planning is most of their cost: a read by id on the partitioned jobs table
plans every partition each time (~0.4 ms of server CPU with 6 partitions, ~60 ms
with the default ~400; prepared: ~0.2 and ~2 ms, docs/performance.md). Pooled
connections live on, so a worker prepares a statement once per connection.

``prepared_fetchone`` runs such a statement. On the usual path (PostgreSQL, the
connection in autocommit, no debug cursor or execute wrapper installed) it goes
straight to libpq through psycopg's ``pq`` layer: parameters dumped as text by the
connection's own adapters, the named statement executed (libpq releases the GIL
while it waits), the row loaded by the connection's loaders. That is the same
statement with the same values as a cursor would give, for ~a third of the Python
(~50 against ~130 us of CPU for the request budget's statement, measured). Errors
arrive as Django's, through ``wrap_database_errors``, as from a cursor.

Inside a transaction (psycopg opens it lazily on its own next statement), with
``CaptureQueriesContext`` or an execute wrapper (tests, failure injection), the
statement goes through Django's cursor wrapper instead, prepared just the same.
``prepared_pipeline`` sends several such statements in one round trip, each in a
transaction of its own (libpq's pipeline mode, a Sync after each): the single-job
create's request count and its INSERT (scheduling/api/jobs/fastpath.py). It is there only
on the direct path; elsewhere the caller runs the statements one by one.

SQLite (no server planning to save), and PostgreSQL with
``SENDLATER_DB_PREPARED_STATEMENTS=false`` (a pooler that cannot keep prepared
statements, e.g. PgBouncer before 1.21), get Django's ordinary cursor. Statements
keep Django's ``%s`` placeholders in every case.
"""

from __future__ import annotations

import itertools
import re
import select
import threading
import weakref
from collections.abc import Sequence
from functools import cache
from typing import Any, NamedTuple

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper


class _Session(NamedTuple):
    """What this process keeps per psycopg connection: its adapters (one transformer,
    as a cursor has) and the names of the statements prepared on it."""

    transformer: Any
    held: set[bytes]


# The statements this process has named, and each connection's session state.
_names: dict[str, bytes] = {}
_numbers = itertools.count(1)
_naming = threading.Lock()
_prepared_on: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()
_NO_SUCH_STATEMENT = "26000"  # invalid_sql_statement_name: e.g. after DEALLOCATE ALL


def prepared_cursor() -> CursorWrapper:
    """A cursor on the default connection whose ``execute`` prepares the statement."""
    if connection.vendor != "postgresql" or not settings.SENDLATER_DB_PREPARED_STATEMENTS:
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        return connection._prepare_cursor(_preparing_cursor_class()(connection.connection))


def prepared_fetchone(sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    """Run ``sql`` (``%s`` placeholders) prepared; its first row, or None (no row, or
    a statement that returns none)."""
    db = connections[DEFAULT_DB_ALIAS]  # the thread's wrapper: one lookup, not one per use
    if _direct(db):
        with db.wrap_database_errors:
            return _pq_fetchone(db.connection, sql, params)
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() if cursor.description is not None else None


def prepared_pipeline(
    statements: Sequence[tuple[str, Sequence[Any]]],
) -> list[tuple[Any, ...] | Exception | None] | None:
    """Run ``statements`` prepared, in one round trip, each in its own transaction.

    Returns, in order, each statement's first row (None: no row), or the error it
    raised as Django raises it (a statement's error leaves the others as they went:
    each ends at its own Sync). A lost connection raises. None where the direct path
    is not available (``_direct``): nothing was sent, the caller runs them itself.
    """
    db = connections[DEFAULT_DB_ALIAS]
    if not _direct(db):
        return None
    with db.wrap_database_errors:
        outcomes = _pq_pipeline(db.connection, statements)
    return [_as_django(db, o) if isinstance(o, Exception) else o for o in outcomes]


def _direct(db: BaseDatabaseWrapper) -> bool:
    """Whether the statement can skip psycopg's and Django's cursors (see above)."""
    if db.vendor != "postgresql" or not settings.SENDLATER_DB_PREPARED_STATEMENTS:
        return False
    if db.queries_logged or db.execute_wrappers:
        return False
    db.close_if_health_check_failed()
    db.ensure_connection()
    return db.connection.autocommit and not db.in_atomic_block


def _session(raw: Any) -> _Session:
    from psycopg.adapt import Transformer

    session = _prepared_on.get(raw)
    if session is None:  # one connection per thread: its state is that thread's
        session = _prepared_on[raw] = _Session(Transformer(raw), set())
    return session


def _dumped(transformer: Any, params: Sequence[Any]) -> Any:
    from psycopg.adapt import PyFormat

    return transformer.dump_sequence(params, [PyFormat.TEXT] * len(params))


def _pq_fetchone(raw: Any, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    transformer, held = _session(raw)
    values = _dumped(transformer, params)
    name = _name(sql)
    pgconn = raw.pgconn
    for attempt in (1, 2):
        if name not in held:
            _check(pgconn.prepare(name, _numbered(sql).encode(), None), raw)
            held.add(name)
        result = pgconn.exec_prepared(name, values)
        if attempt == 1 and _sqlstate(result) == _NO_SUCH_STATEMENT:
            held.discard(name)  # the session lost it: prepare again, once
            continue
        break
    _check(result, raw)
    return _first_row(transformer, result)


def _first_row(transformer: Any, result: Any) -> tuple[Any, ...] | None:
    from psycopg import pq

    if result.status != pq.ExecStatus.TUPLES_OK or result.ntuples == 0:
        return None
    transformer.set_pgresult(result)
    return transformer.load_row(0, tuple)


def _pq_pipeline(
    raw: Any, statements: Sequence[tuple[str, Sequence[Any]]]
) -> list[tuple[Any, ...] | Exception | None]:
    """The statements through libpq's pipeline mode: prepared first where this session
    has not prepared them, then all sent, one Sync after each, and the results read
    without holding the GIL while they are awaited (a blocking ``PQgetResult`` would
    hold it). A statement the session lost (``DEALLOCATE ALL``) is prepared again
    and run again on its own: it did not run."""
    from psycopg import Error, OperationalError, pq

    transformer, held = _session(raw)
    pgconn = raw.pgconn
    names = []
    for sql, _ in statements:
        name = _name(sql)
        if name not in held:
            _check(pgconn.prepare(name, _numbered(sql).encode(), None), raw)
            held.add(name)
        names.append(name)
    pgconn.enter_pipeline_mode()
    try:
        for name, (_, params) in zip(names, statements, strict=True):
            pgconn.send_query_prepared(name, _dumped(transformer, params))
            pgconn.pipeline_sync()
        while pgconn.flush():
            select.select([], [pgconn.socket], [])
        results = []
        for _ in names:
            result = _result_next(pgconn)
            while _result_next(pgconn) is not None:  # the statement's end
                pass
            if _result_next(pgconn).status != pq.ExecStatus.PIPELINE_SYNC:
                raise OperationalError("the pipeline's results lost their order")
            results.append(result)
    finally:
        if pgconn.pipeline_status != pq.PipelineStatus.OFF:
            try:
                pgconn.exit_pipeline_mode()
            except Error:  # results left unread: the session's state is unknown
                pgconn.finish()  # so it is not used again (Django sees it unusable)
    outcomes: list[tuple[Any, ...] | Exception | None] = []
    for (sql, params), name, result in zip(statements, names, results, strict=True):
        try:
            if _sqlstate(result) == _NO_SUCH_STATEMENT:
                held.discard(name)
                outcomes.append(_pq_fetchone(raw, sql, params))
                continue
            _check(result, raw)
        except Error as error:  # the statement's own error: the others stand
            outcomes.append(error)
            continue
        outcomes.append(_first_row(transformer, result))
    return outcomes


def _result_next(pgconn: Any) -> Any:
    """``PQgetResult`` once it will not block; the wait releases the GIL."""
    while pgconn.is_busy():
        select.select([pgconn.socket], [], [])
        pgconn.consume_input()
    return pgconn.get_result()


def _sqlstate(result: Any) -> str | None:
    from psycopg import pq

    if result.status != pq.ExecStatus.FATAL_ERROR:
        return None
    sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
    return None if sqlstate is None else sqlstate.decode()


def _as_django(db: BaseDatabaseWrapper, error: Exception) -> Exception:
    """``error`` (psycopg's) as Django's wrapper raises it: the same class names in
    ``django.db``, the connection's ``errors_occurred`` set where Django sets it."""
    try:
        with db.wrap_database_errors:
            raise error
    except Exception as wrapped:
        return wrapped
    return error  # pragma: no cover - the block always raises


def _check(result: Any, raw: Any) -> None:
    from psycopg import errors, pq

    if result.status in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
        return
    error = errors.error_from_result(result, encoding=raw.info.encoding)
    if raw.pgconn.status == pq.ConnStatus.BAD and not isinstance(error, errors.OperationalError):
        # The server went away mid-statement (no SQLSTATE): what psycopg's cursor raises.
        raise errors.OperationalError(f"the connection is lost: {error}") from error
    raise error


def _name(sql: str) -> bytes:
    name = _names.get(sql)
    if name is None:
        with _naming:
            name = _names.setdefault(sql, f"sendlater_{next(_numbers)}".encode())
    return name


@cache
def _numbered(sql: str) -> str:
    """``%s`` placeholders as PostgreSQL's ``$1``, ``$2``, ... (no ``%`` otherwise)."""
    if re.search(r"%[^s]", sql):
        raise ValueError("prepared statements take %s placeholders only")
    counter = itertools.count(1)
    return re.sub(r"%s", lambda _: f"${next(counter)}", sql)


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
