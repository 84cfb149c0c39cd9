"""Where a poller's next read of a ``(shard, bucket)`` starts, so it never reads a job
it already has in flight.

Jobs in flight are still pending rows (the lease is the lock: nothing marks them
until their one write), so a read from the start of the bucket would return
them again. Per ``(shard, bucket)`` with jobs in flight, the poller keeps the
greatest due time it handed out (``top``) and reads from there on, passing over
the few in-flight rows due exactly at ``top``. A row that commits later with an
earlier due time (a late write into the open bucket, a sweep) lies behind the
cursor: a rescan from the start finds it, and so does the first read after the
``(shard, bucket)`` has nothing in flight. A rescan reads the jobs in flight again
(and passes over them), so its interval adapts: ``rescan_seconds`` after one that
found late rows, doubling after each that found none, up to ``RESCAN_BACKOFF`` times
that (a burst with no late writes rescans rarely; a stream of them, every interval).

A wake-up (``polling.common.wakeups``: another write-back inserted jobs due now into
the shard) may be such a late row: a poller's write-back takes its ``now`` before it
commits, while this poller reads jobs due up to its own ``now``, so in a stream of
due jobs a callback or a topic's child can commit just behind the cursor. A woken
shard's cursors rescan at the next read, at most every ``WOKEN_RESCAN_SECONDS``.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from polling.dispatch.base import ClaimedJob

RESCAN_SECONDS = 1.0
RESCAN_BACKOFF = 4  # the longest interval, in rescan_seconds
WOKEN_RESCAN_SECONDS = 0.25  # a woken shard's cursors rescan at most this often


@dataclass(slots=True)
class _Cursor:
    due: dict[UUID, datetime] = field(default_factory=dict)  # in flight: id -> due_at
    top: datetime | None = None  # the greatest due_at handed out
    at_top: int = 0  # jobs in flight due exactly at ``top``
    rescan_at: float = 0.0  # monotonic time of the next rescan from the start
    rescan_every: float = RESCAN_SECONDS
    rescanned_at: float = 0.0  # monotonic time of the last rescan (or of the cursor's start)


@dataclass(frozen=True, slots=True)
class Read:
    """How to read a ``(shard, bucket)``: from ``after`` (None: the start), passing
    over ``skip``, fetching ``fetch`` rows to keep ``limit``."""

    after: datetime | None
    skip: dict[UUID, datetime] | tuple[()]
    fetch: int
    rescan_below: datetime | None = None  # a rescan: rows due before this are late ones


class ReadCursors:
    """One poller's cursors; every method runs on the poller's thread."""

    def __init__(self, rescan_seconds: float = RESCAN_SECONDS) -> None:
        self.rescan_seconds = rescan_seconds
        self._cursors: dict[tuple[int, datetime], _Cursor] = {}

    def plan(self, shard: int, bucket: datetime, limit: int) -> Read:
        cursor = self._cursors.get((shard, bucket))
        if cursor is None or not cursor.due:
            return Read(after=None, skip=(), fetch=limit)
        if time.monotonic() >= cursor.rescan_at:
            return Read(
                after=None, skip=cursor.due, fetch=limit + len(cursor.due), rescan_below=cursor.top
            )
        return Read(after=cursor.top, skip=cursor.due, fetch=limit + cursor.at_top)

    def rescanned(
        self, shard: int, bucket: datetime, read: Read, jobs: Iterable[ClaimedJob]
    ) -> None:
        """After a rescan: the next one comes sooner if it found late rows, later if not."""
        cursor = self._cursors.get((shard, bucket))
        if cursor is None or read.rescan_below is None:
            return
        late = any(job.due_at < read.rescan_below for job in jobs)
        limit = self.rescan_seconds * RESCAN_BACKOFF
        cursor.rescan_every = self.rescan_seconds if late else min(limit, 2 * cursor.rescan_every)
        cursor.rescanned_at = time.monotonic()
        cursor.rescan_at = cursor.rescanned_at + cursor.rescan_every

    def handed(self, jobs: Iterable[ClaimedJob], *, shard_read: bool = True) -> None:
        """``jobs`` (one read, due order) entered the window.

        ``shard_read`` False: a held flow-control key's read (``take.flow_take``),
        which may span shards and buckets and is no part of the shards' read order:
        its jobs are only passed over by later reads, the cursor's ``top`` stays.
        """
        if not shard_read:
            for job in jobs:
                self._cursor(job.shard, job.bucket).due[job.id] = job.due_at
            return
        cursor: _Cursor | None = None
        for job in jobs:
            if cursor is None:
                cursor = self._cursor(job.shard, job.bucket)
            cursor.due[job.id] = job.due_at
            if cursor.top is None or job.due_at > cursor.top:
                cursor.top, cursor.at_top = job.due_at, 1
            elif job.due_at == cursor.top:
                cursor.at_top += 1

    def _cursor(self, shard: int, bucket: datetime) -> _Cursor:
        cursor = self._cursors.get((shard, bucket))
        if cursor is None:
            now = time.monotonic()
            cursor = self._cursors[(shard, bucket)] = _Cursor(
                rescan_at=now + self.rescan_seconds,
                rescan_every=self.rescan_seconds,
                rescanned_at=now,
            )
        return cursor

    def resolved(self, jobs: Iterable[ClaimedJob]) -> None:
        """``jobs`` left the window (written back, or given up)."""
        for job in jobs:
            key = (job.shard, job.bucket)
            cursor = self._cursors.get(key)
            if cursor is None or cursor.due.pop(job.id, None) is None:
                continue
            if job.due_at == cursor.top and cursor.at_top:
                cursor.at_top -= 1
            if not cursor.due:
                del self._cursors[key]  # the next read starts afresh: nothing to pass over

    def rescan_all(self) -> None:
        """Read every ``(shard, bucket)`` from its start next time: rows left out of the
        reads (a busy host's) may lie behind the cursors."""
        for cursor in self._cursors.values():
            cursor.rescan_at = 0.0

    def woken(self, shards: Collection[int] | None) -> None:
        """Jobs due now were written into ``shards`` (None: any): their cursors rescan
        at the next read, or ``WOKEN_RESCAN_SECONDS`` after their last rescan."""
        for (shard, _), cursor in self._cursors.items():
            if shards is None or shard in shards:
                soon = cursor.rescanned_at + WOKEN_RESCAN_SECONDS
                cursor.rescan_at = min(cursor.rescan_at, soon)

    def clear(self) -> None:
        self._cursors.clear()

    def __len__(self) -> int:
        return len(self._cursors)
