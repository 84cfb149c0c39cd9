"""The in-process handler sink: calls handlers registered in ``scheduling.handlers``."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from django.db import close_old_connections

from polling.dbtime import DB_TIME
from polling.dispatch.base import ClaimedJob, Outcome
from polling.renewer import PROGRESS
from scheduling import handlers

logger = logging.getLogger(__name__)

_MAX_ERROR_CHARS = 2000


class HandlerSink:
    """Runs each job's handler, up to ``concurrency`` at a time on a thread pool.

    A handler that returns is ``delivered``; one that raises is ``retry`` (the
    error text kept in last_error); an unknown handler name is ``dead``.
    """

    def __init__(self, *, concurrency: int = 8) -> None:
        self._concurrency = max(1, concurrency)
        self._pool = (
            ThreadPoolExecutor(max_workers=self._concurrency, thread_name_prefix="handler")
            if self._concurrency > 1
            else None
        )

    def deliver(self, jobs: Sequence[ClaimedJob]) -> list[Outcome]:
        """Outcomes in the order of ``jobs``.

        ``concurrency`` workers each take the next job not yet taken until none is
        left: a slow handler holds up one worker, not a fixed share of the batch,
        and a batch costs ``concurrency`` pool tasks, not one per job (with fast
        handlers the per-job future was most of the cost).
        """
        if self._pool is None or len(jobs) <= 1:
            return [self._deliver_one(job) for job in jobs]
        outcomes: list[Outcome | None] = [None] * len(jobs)
        taken = itertools.count()  # next() on a count is atomic: each index goes once

        def work() -> None:
            try:
                while (i := next(taken)) < len(jobs):
                    outcomes[i] = self._deliver_one(jobs[i])
            finally:
                # A handler may use the ORM from a pool thread: hand its connection back.
                close_old_connections()

        workers = [self._pool.submit(work) for _ in range(min(self._concurrency, len(jobs)))]
        for worker in workers:
            worker.result()
        return outcomes  # type: ignore[return-value]  # every index was filled

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    @staticmethod
    def _deliver_one(job: ClaimedJob) -> Outcome:
        try:
            return HandlerSink._call(job)
        finally:
            PROGRESS.touch()  # a delivery finished: the batch is moving (lease renewer)

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
