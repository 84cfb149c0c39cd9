"""The in-process handler sink: calls handlers registered in ``scheduling.handlers``."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence

from django.db import close_old_connections

from polling.common.database_time import DB_TIME
from polling.dispatch.base import ClaimedJob, Done, Outcome, deliver_all
from polling.dispatch.spans import handler_traced
from polling.ownership.renewer import PROGRESS
from scheduling import handlers, tracing

logger = logging.getLogger(__name__)

_MAX_ERROR_CHARS = 2000
_STOP = None  # a worker's signal to exit


class HandlerSink:
    """Runs each job's handler on ``concurrency`` worker threads, reporting as each ends.

    A handler that returns is ``delivered``; one that raises is ``retry`` (the
    error text kept in last_error); an unknown handler name is ``dead``. Workers
    take jobs one at a time in the order submitted, so a slow handler holds up one
    worker, not a share of a batch. Handlers registered ``inline`` (``noop``) run
    on the submitting thread: a hand-off to a worker would cost more than the call;
    so does every handler with ``concurrency=1`` (one at a time, in order, on the
    poller's own thread and database connection).
    """

    def __init__(self, *, concurrency: int = 8) -> None:
        self._concurrency = max(1, concurrency)
        self._queue: queue.SimpleQueue[tuple[ClaimedJob, Done] | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, jobs: Sequence[ClaimedJob], done: Done) -> None:
        for job in jobs:
            if self._concurrency == 1 or handlers.is_inline(job.target):
                done(job, self._deliver_one(job))
            else:
                self._start_workers()
                self._queue.put((job, done))

    def deliver(self, jobs: Sequence[ClaimedJob]) -> list[Outcome]:
        """Run ``jobs`` and wait for all of them, in their order."""
        return deliver_all(self, jobs)

    def close(self) -> None:
        """Stop the workers once the jobs already submitted have run."""
        for _ in self._workers:
            self._queue.put(_STOP)
        for worker in self._workers:
            worker.join()
        self._workers = []

    def _start_workers(self) -> None:
        if self._workers:
            return
        with self._lock:
            while len(self._workers) < self._concurrency:
                worker = threading.Thread(
                    target=self._work, name=f"handler-{len(self._workers)}", daemon=True
                )
                worker.start()
                self._workers.append(worker)

    def _work(self) -> None:
        try:
            while True:
                if self._queue.empty():
                    # A handler may use the ORM: hand its connection back while idle.
                    close_old_connections()
                item = self._queue.get()
                if item is _STOP:
                    return
                job, done = item
                done(job, self._deliver_one(job))
        finally:
            close_old_connections()

    @staticmethod
    def _deliver_one(job: ClaimedJob) -> Outcome:
        try:
            if tracing.TRACER is not None and job.trace_context:
                return handler_traced(HandlerSink._call, job)
            return HandlerSink._call(job)
        finally:
            PROGRESS.touch()  # a delivery finished: the work is moving (lease renewer)

    @staticmethod
    def _call(job: ClaimedJob) -> Outcome:
        started = DB_TIME.now()
        clock = time.monotonic()
        try:
            handler = handlers.get(job.target)
        except KeyError:
            return Outcome(
                job_id=job.id,
                result="dead",
                error=f"unknown handler {job.target!r}",
                started_at=started,
                duration_seconds=0.0,
            )
        try:
            handler(
                handlers.Delivery(
                    job_id=job.id,
                    attempt=job.attempt,
                    due_at=job.due_at,
                    payload=job.payload,
                    metadata=dict(job.metadata),
                    schedule_id=job.schedule_id,
                    scheduled_for=job.scheduled_for,
                )
            )
        except Exception as error:  # a handler's failure is the job's, not the poller's
            logger.warning(
                "handler %s failed: job=%s shard=%s attempt=%s: %r",
                job.target,
                job.id,
                job.shard,
                job.attempt,
                error,
            )
            return Outcome(
                job_id=job.id,
                result="retry",
                error=f"{type(error).__name__}: {error}"[:_MAX_ERROR_CHARS],
                started_at=started,
                duration_seconds=time.monotonic() - clock,
            )
        return Outcome(
            job_id=job.id,
            result="delivered",
            started_at=started,
            duration_seconds=time.monotonic() - clock,
        )
