"""Wake-ups: a job a poller writes due now (a callback, a topic's child) is read at once.

Between passes a poller waits up to its poll interval. A job the write-back of one
poller inserts due now would wait that long before any poller reads it, once per
step: a callback up to a whole interval behind the outcome that caused it, a topic's
children an interval behind their parent. So the write-back that inserts such jobs
says so (``due_now_written``, in its transaction) and the pollers owning their shards
start a pass at once (not sooner than a tenth of the interval after their last one):

- in this process, every ``Wakeup`` hears it when the transaction commits (SQLite
  and PostgreSQL alike; a rolled-back write wakes nobody);
- on PostgreSQL, ``NOTIFY sendlater_due`` with the shards is sent in the same
  transaction (delivered at its commit, never for a rollback), and each poller's
  ``WakeListener`` (a thread with a connection of its own, ``LISTEN``) passes it on.

A wake-up only hurries a pass: a lost notification (the listener reconnecting after
a failover, or ``SENDLATER_WAKE_LISTEN`` off behind pgbouncer, where a pooled server
connection cannot keep a ``LISTEN``) costs at most the poll interval it saves.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Collection, Iterable

from django.db import connection, transaction

from polling.common.sql import is_postgres

logger = logging.getLogger(__name__)

CHANNEL = "sendlater_due"
# NOTIFY's payload is limited to 8000 bytes: a longer shard list says "any shard" ("").
_PAYLOAD_LIMIT = 7900
# The listener reconnects after a lost connection, backing off up to this (seconds).
RECONNECT_CAP_SECONDS = 5.0


class Wakeup:
    """What one poller waits on between passes: shards with jobs just written due now.

    Thread-safe: the listener's thread and on-commit hooks ``notify``; the poller's
    loop asks ``relevant`` (and ``wait``s) and ``take``s them at the start of a pass.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._shards: set[int] = set()
        self._any = False
        _WAKEUPS.add(self)

    def notify(self, shards: Iterable[int] | None) -> None:
        """Jobs due now were written into ``shards`` (None: any shard)."""
        with self._lock:
            if shards is None:
                self._any = True
            else:
                self._shards.update(shards)
            self._event.set()

    def relevant(self, owned: Collection[int]) -> bool:
        """Whether a job was written due now into a shard in ``owned`` since the last
        ``take``; the others are forgotten (their owners heard of them too)."""
        with self._lock:
            if self._any or not self._shards.isdisjoint(owned):
                return True
            self._shards.clear()
            self._event.clear()
            return False

    def take(self) -> tuple[set[int], bool]:
        """A pass starts (it reads whatever was written before it): the shards named
        since the last ``take``, and whether any shard was; forget them."""
        with self._lock:
            shards, anything = self._shards, self._any
            self._shards, self._any = set(), False
            self._event.clear()
            return shards, anything

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a notification; True if one is pending."""
        return self._event.wait(timeout)


_WAKEUPS: weakref.WeakSet[Wakeup] = weakref.WeakSet()


def due_now_written(shards: Collection[int]) -> None:
    """Jobs due now were inserted into ``shards`` in the current transaction: wake
    their owners when it commits (this process's pollers, and on PostgreSQL every
    listening poller through ``NOTIFY``). Call inside the transaction."""
    if not shards:
        return
    wanted = sorted(set(shards))
    if is_postgres():
        payload = ",".join(map(str, wanted))
        if len(payload) > _PAYLOAD_LIMIT:
            payload = ""
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, payload])
    transaction.on_commit(lambda: _broadcast(wanted))


def _broadcast(shards: list[int]) -> None:
    for wakeup in list(_WAKEUPS):
        wakeup.notify(shards)


def payload_shards(payload: str) -> list[int] | None:
    """The shards a notification names (None: any shard, or a payload not understood)."""
    try:
        return [int(part) for part in payload.split(",")] if payload else None
    except ValueError:
        return None


class WakeListener:
    """A daemon thread: ``LISTEN sendlater_due`` on a connection of its own and pass each
    notification to ``wakeup``; reconnect (backing off) when the connection is lost."""

    def __init__(self, *, wakeup: Wakeup, name: str) -> None:
        self.wakeup = wakeup
        self.name = name
        self.listening = threading.Event()  # set while a LISTEN is in place (tests)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wake-listener", daemon=True)

    @classmethod
    def started(cls, *, wakeup: Wakeup, name: str) -> WakeListener | None:
        """Start one if the database is PostgreSQL and ``SENDLATER_WAKE_LISTEN`` is on."""
        from polling import conf

        if not is_postgres() or not conf.wake_listen():
            return None
        listener = cls(wakeup=wakeup, name=name)
        listener._thread.start()
        return listener

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._listen()
                failures = 0
            except Exception as error:  # the database went away: polling goes on
                failures += 1
                self.listening.clear()
                delay = min(RECONNECT_CAP_SECONDS, 0.25 * 2**failures)
                if failures == 1:
                    logger.warning(
                        "poller %s: wake-up listener lost its connection (%s);"
                        " reconnecting, polling meanwhile",
                        self.name,
                        error,
                    )
                self._stop.wait(delay)

    def _listen(self) -> None:
        import psycopg

        params = connection.get_connection_params()
        for key in ("cursor_factory", "context", "prepare_threshold"):
            params.pop(key, None)
        with psycopg.connect(**params, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self.listening.set()
            # A notification sent while reconnecting was lost: a pass costs little.
            self.wakeup.notify(None)
            while not self._stop.is_set():
                for note in conn.notifies(timeout=0.5):
                    self.wakeup.notify(payload_shards(note.payload))
