"""How long a poller's transaction may keep what others wait for.

A poller stopped inside a transaction (SIGSTOP, a paused VM, a process starved for
seconds) keeps that transaction's locks: a shard's window lock
(``scheduling.inflight``), the job rows of a write-back. Its leases expire and the
next owner takes its shards over; without a bound that owner would wait on those
locks until the stopped process woke up, renewing none of its own leases meanwhile,
and a cancel of one of those jobs would wait as long. Two bounds, both
transaction-local (``set_config(..., true)``: they hold under pgbouncer's
transaction pooling):

- ``idle_in_transaction_session_timeout`` = the lease (``SENDLATER_LEASE_SECONDS``):
  PostgreSQL ends the session of a poller idle inside a transaction for a whole
  lease, which lets its locks go. By then its leases have expired and the fence
  refuses its writes anyway; on waking it reconnects
  (``polling.poller._reset_broken_connection``), as after ``pg_terminate_backend``.
- ``lock_timeout`` = ``lock_wait_ms()`` on the reads that take window locks
  (``bounded_atomic(lock_wait=True)``): a reader gives a window up after that wait
  (``WindowBusy``) and goes on with its other shards and its lease renewals; the
  shard is read again on a later pass.

Set only by the outermost transaction: inside a caller's transaction (a test's) a
SET LOCAL would outlive the block. SQLite has neither setting (and serialises writers).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import OperationalError, connection, transaction

from polling.sqlutil import fetch_all, is_postgres
from scheduling.storage.dberrors import is_lock_timeout

# The longest a reader waits for a window lock (shorter with a short lease).
LOCK_WAIT_MS = 1000

IDLE_BOUND_SQL = "SELECT set_config('idle_in_transaction_session_timeout', %s, true)"
BOTH_BOUNDS_SQL = (
    "SELECT set_config('idle_in_transaction_session_timeout', %s, true),"
    " set_config('lock_timeout', %s, true)"
)


class WindowBusy(Exception):
    """A lock a read needs was held past ``lock_wait_ms()``: nothing was read."""


def idle_bound_ms() -> int:
    return int(float(settings.SENDLATER_LEASE_SECONDS) * 1000)


def lock_wait_ms() -> int:
    """At most ``LOCK_WAIT_MS``, at most a quarter lease: a wait never costs a renewal."""
    return max(50, min(LOCK_WAIT_MS, idle_bound_ms() // 4))


@contextmanager
def bounded_atomic(*, lock_wait: bool = False) -> Iterator[None]:
    """``transaction.atomic()`` for a poller: PostgreSQL ends it if the process stops
    inside it for a lease; with ``lock_wait`` its lock waits are bounded too and one
    that times out raises ``WindowBusy`` (after the rollback).

    One statement more per transaction (the settings), on PostgreSQL only.
    """
    outermost = not connection.in_atomic_block
    try:
        with transaction.atomic():
            if outermost and is_postgres():
                idle = f"{idle_bound_ms()}ms"
                if lock_wait:
                    fetch_all(BOTH_BOUNDS_SQL, [idle, f"{lock_wait_ms()}ms"])
                else:
                    fetch_all(IDLE_BOUND_SQL, [idle])
            yield
    except OperationalError as error:
        if lock_wait and is_lock_timeout(error):
            raise WindowBusy(str(error).strip()) from error
        raise
