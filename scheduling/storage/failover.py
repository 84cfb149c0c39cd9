"""What a lost or demoted PostgreSQL primary looks like to this process, and the cure.

During a failover (docs/ha.md) a statement fails in one of two ways: the
connection is gone (the old primary vanished: ``OperationalError`` or
``InterfaceError``), or it still works but is read-only (the old primary came back
demoted, or a switchover: SQLSTATE 25006, which Django raises as
``InternalError``). Either way the cure is the same: throw the connection away,
pooled or not, so that the next statement connects again and the multi-host
``DATABASE_URL`` (``target_session_attrs=read-write``) finds the new primary.
"""

from __future__ import annotations

import logging
import sys

from django.db import InterfaceError, OperationalError, connection

from scheduling.storage.dberrors import sqlstate_of

logger = logging.getLogger(__name__)

READ_ONLY_SQLSTATE = "25006"  # read_only_sql_transaction
# The server is shutting down or starting up (admin_shutdown, crash_shutdown,
# cannot_connect_now), or ended the session for idling in a transaction
# (idle_in_transaction_session_timeout, polling.ownership.stall_bounds): the connection is as
# good as gone.
GONE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "25P03"})


def is_failover_error(exc: BaseException | None) -> bool:
    """True for an error that a fresh connection to the current primary may not have."""
    if exc is None:
        return False
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    sqlstate = sqlstate_of(exc)
    return sqlstate == READ_ONLY_SQLSTATE or sqlstate in GONE_SQLSTATES


def connection_discard() -> None:
    """Close this thread's connection for good, so the next query opens a new one.

    A pooled connection is closed before Django hands it back, so the pool drops it
    instead of lending it out again (a demoted server still answers health checks).
    Inside an atomic block nothing is closed: the block's owner sees the error and
    the connection is discarded when the error reaches the request or loop edge.
    """
    if connection.in_atomic_block:
        return
    raw = connection.connection
    try:
        if raw is not None:
            raw.close()
    except Exception:  # already broken: closing is all we wanted
        logger.debug("closing a broken connection failed", exc_info=True)
    try:
        connection.close()
    except Exception:
        logger.debug("returning a closed connection failed", exc_info=True)
        connection.connection = None


def connection_reset_if_broken() -> None:
    """In an ``except`` block: close the connection if it is broken or read-only (a
    failover, docs/ha.md; a session PostgreSQL ended), so the next query reconnects,
    to the new primary if there is one."""
    try:
        if connection.connection is None or connection.in_atomic_block:
            return
        if is_failover_error(sys.exc_info()[1]) or not connection.is_usable():
            connection_discard()
    except Exception:
        logger.exception("could not reset the database connection")
