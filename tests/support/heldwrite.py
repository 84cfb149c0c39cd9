"""A write whose transaction stays open on another thread until the test lets it commit.

The late-write race: rows inserted into a bucket that the pollers close, and
pass, before the transaction commits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection, transaction


class HeldWrite:
    """Runs ``write`` inside a transaction on a thread of its own and holds it open."""

    def __init__(self, write: Callable[[], list[Any]], *, hold_seconds: float = 60) -> None:
        self._write = write
        self._hold_seconds = hold_seconds
        self._inserted, self._commit = threading.Event(), threading.Event()
        self._errors: list[BaseException] = []
        self.written: list[Any] = []
        self._thread = threading.Thread(target=self._run)

    def start(self, timeout: float = 30) -> list[Any]:
        """Start the writer; return what ``write`` returned, still uncommitted."""
        self._thread.start()
        assert self._inserted.wait(timeout) and not self._errors, self._errors
        return self.written

    def commit(self, timeout: float = 30) -> None:
        """Let the transaction commit and wait for the writer to finish."""
        self._commit.set()
        self._thread.join(timeout)
        assert not self._errors, self._errors

    def _run(self) -> None:
        try:
            with transaction.atomic():
                self.written.extend(self._write())
                self._inserted.set()
                assert self._commit.wait(self._hold_seconds)
        except BaseException as error:  # surfaced by the test's thread
            self._errors.append(error)
            self._inserted.set()
        finally:
            connection.close()
