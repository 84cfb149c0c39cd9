"""How long a poller's transaction may keep what others wait for.

A poller stopped inside a transaction (SIGSTOP, a paused VM, a process starved for
seconds) keeps that transaction's locks: a shard's window lock
(``scheduling.jobs.inflight``), the job rows of a write-back. Its leases expire and the
next owner takes its shards over; without a bound that owner would wait on those
locks until the stopped process woke up, renewing none of its own leases meanwhile,
and a cancel of one of those jobs would wait as long. Two bounds:

- ``idle_in_transaction_session_timeout`` = the lease (``SENDLATER_LEASE_SECONDS``):
  PostgreSQL ends the session of a poller idle inside a transaction for a whole
  lease, which lets its locks go. By then its leases have expired and the fence
  refuses its writes anyway; on waking it reconnects
  (``scheduling.storage.failover.connection_reset_if_broken``), as after
  ``pg_terminate_backend``. Set once per connection of a ``runpoller``'s loop thread,
  which runs every poller transaction (``session_bound_install``; a Django task's
  handler thread keeps its own transactions unbounded). Behind pgbouncer's
  transaction pooling (``SENDLATER_PGBOUNCER``), where a session setting would land
  on whichever server connection ran it, each poller transaction sets it for itself
  instead (one statement more).
- ``lock_timeout`` = ``lock_wait_ms()`` on the reads that take window locks, set in
  their lock statement itself (``LOCK_BOUND_CTE``, transaction-local): a reader gives
  a window up after that wait (``WindowBusy``) and goes on with its other shards and
  its lease renewals; the shard is read again on a later pass.

The transaction-local settings are made by the outermost transaction only: inside a
caller's transaction (a test's) a SET LOCAL would outlive the block. SQLite has
neither setting (and serialises writers).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from polling.common.sql import fetch_all, is_postgres
from scheduling.storage.dberrors import is_lock_timeout

# The longest a reader waits for a window lock (shorter with a short lease).
LOCK_WAIT_MS = 1000

IDLE_BOUND_SQL = "SELECT set_config('idle_in_transaction_session_timeout', %s, false)"
IDLE_UNBOUND_SQL = "RESET idle_in_transaction_session_timeout"
IDLE_BOUND_LOCAL_SQL = "SELECT set_config('idle_in_transaction_session_timeout', %s, true)"
# Put before a lock statement whose FROM names ``bound``: the lock waits are bounded
# from that statement on, to the end of its transaction (its first parameter).
LOCK_BOUND_CTE = "WITH bound AS MATERIALIZED (SELECT set_config('lock_timeout', %s, true)) "


class WindowBusy(Exception):
    """A lock a read needs was held past ``lock_wait_ms()``: nothing was read."""


def idle_bound_ms() -> int:
    return int(float(settings.SENDLATER_LEASE_SECONDS) * 1000)


def lock_wait_ms() -> int:
    """At most ``LOCK_WAIT_MS``, at most a quarter lease: a wait never costs a renewal."""
    return max(50, min(LOCK_WAIT_MS, idle_bound_ms() // 4))


def lock_wait_param() -> str:
    return f"{lock_wait_ms()}ms"


def _behind_pgbouncer() -> bool:
    return bool(getattr(settings, "SENDLATER_PGBOUNCER", False))


_bound_thread: int | None = None


def _bound_session(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    if connection.vendor != "postgresql" or _behind_pgbouncer():
        return
    if threading.get_ident() == _bound_thread:
        with connection.cursor() as cursor:
            cursor.execute(IDLE_BOUND_SQL, [f"{idle_bound_ms()}ms"])
    elif "pool" in connection.settings_dict.get("OPTIONS", {}):
        # e.g. a Django task's handler thread, whose transactions are its own: a pooled
        # connection the loop's thread once had would still carry the bound.
        with connection.cursor() as cursor:
            cursor.execute(IDLE_UNBOUND_SQL)


def session_bound_install() -> None:
    """Bound the connections of the calling thread (a ``runpoller``'s loop, which runs
    every poller transaction), the open one and those it opens later."""
    global _bound_thread
    _bound_thread = threading.get_ident()
    connection_created.connect(_bound_session, dispatch_uid="sendlater.stallbound")
    if connection.connection is not None:
        _bound_session(None, connection)


def session_bound_remove() -> None:
    """Undo ``session_bound_install`` (tests), the open connection's setting too."""
    global _bound_thread
    _bound_thread = None
    connection_created.disconnect(dispatch_uid="sendlater.stallbound")
    if connection.connection is not None and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(IDLE_UNBOUND_SQL)


@contextmanager
def bounded_atomic(*, lock_wait: bool = False) -> Iterator[bool]:
    """``transaction.atomic()`` for a poller; yields whether the caller's lock
    statement is to carry the lock bound (``LOCK_BOUND_CTE``: the outermost
    transaction, on PostgreSQL). With ``lock_wait``, a lock wait that timed out
    raises ``WindowBusy`` (after the rollback). Behind pgbouncer it also sets the
    idle bound for itself.
    """
    outermost = not connection.in_atomic_block
    try:
        with transaction.atomic():
            bounded = outermost and is_postgres()
            if bounded and _behind_pgbouncer():
                fetch_all(IDLE_BOUND_LOCAL_SQL, [f"{idle_bound_ms()}ms"])
            yield bounded
    except OperationalError as error:
        if lock_wait and is_lock_timeout(error):
            raise WindowBusy(str(error).strip()) from error
        raise
