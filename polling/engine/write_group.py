"""The pipeline's third stage: the results waiting for their write, and the fenced
transaction that writes them as one group.

A group is written when ``group_size`` results are ready or the oldest has waited
``group_seconds``: final statuses, retries moved to their new bucket, the rows of
failed attempts, callbacks and topic children, flow-control slots given back, and
the in-flight batches whose jobs are all written. Each row's write is fenced on the
lease epoch the job was read under: a result refused (the lease changed hands since
the read) is dropped, its row still pending, and the shard's new owner delivers it.

Three kinds of result wait here: answered jobs with their outcomes, jobs found
expired before they were sent, and jobs handed back unsent (``released``: parked
for a host, never tried; their rows are left as they are).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from polling import metrics
from polling.common.failpoints import failpoint
from polling.dispatch import spans
from polling.dispatch.base import ClaimedJob, Outcome
from polling.flow.admission import slots_give
from polling.ownership.stall_bounds import bounded_atomic
from polling.writing import writeback
from polling.writing.attempts import attempts_record
from polling.writing.callbacks import outcomes_heard
from polling.writing.endpoint_health import endpoints_health
from polling.writing.fanout import fanout_plan, fanout_write
from polling.writing.retries import results_build
from scheduling import conf as scheduling_conf

logger = logging.getLogger("polling.engine.pipeline")


@dataclass(slots=True)
class Written:
    """One group taken for its write: its jobs (all of them leave the window, written
    or fenced out) and, after the write, the shards whose leases the fence found lost."""

    jobs: list[ClaimedJob] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    expired: list[ClaimedJob] = field(default_factory=list)
    released: list[ClaimedJob] = field(default_factory=list)
    lost: set[int] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.jobs or self.expired or self.released)

    def groups(self) -> tuple[list[ClaimedJob], list[ClaimedJob], list[ClaimedJob]]:
        return self.jobs, self.expired, self.released


class WriteGroup:
    """The results waiting for their write; every method runs on the poller's thread."""

    def __init__(
        self,
        *,
        owner: str,
        group_size: int,
        group_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        slow_seconds: float | None = None,
    ) -> None:
        self.owner = owner
        self._clock = clock
        # A write longer than this holds the poller's thread past a lease renewal.
        self.slow_seconds = slow_seconds or scheduling_conf.lease_seconds() / 3
        self.group_size = max(1, group_size)
        self.group_seconds = group_seconds
        self._jobs: list[ClaimedJob] = []
        self._outcomes: list[Outcome] = []
        self._expired: list[ClaimedJob] = []
        self._released: list[ClaimedJob] = []  # parked, never sent, handed back unwritten
        self._since: float | None = None  # when the oldest unwritten result arrived
        self._batch_left: Counter[int] = Counter()  # in-flight batch -> jobs not yet written

    def __len__(self) -> int:
        return len(self._jobs) + len(self._expired) + len(self._released)

    # --- what enters -----------------------------------------------------------------

    def read(self, jobs: Sequence[ClaimedJob]) -> None:
        """Count read ``jobs`` on their in-flight batches (a batch is forgotten once all
        its jobs are written)."""
        batches = {job.batch for job in jobs}  # one, but a key read may span shards
        if len(batches) == 1:
            self._batch_left[jobs[0].batch] += len(jobs)
        else:
            self._batch_left.update(job.batch for job in jobs)

    def answered(self, job: ClaimedJob, outcome: Outcome) -> None:
        self._started()
        self._jobs.append(job)
        self._outcomes.append(outcome)

    def expired(self, job: ClaimedJob) -> None:
        """``job`` expired before it was sent: written expired, never delivered."""
        self._started()
        self._expired.append(job)

    def released(self, jobs: list[ClaimedJob]) -> None:
        """``jobs`` (parked, never sent) go back unwritten at the next write."""
        if jobs:
            self._started()
            self._released.extend(jobs)

    def _started(self) -> None:
        if self._since is None:
            self._since = self._clock()

    # --- when --------------------------------------------------------------------------

    def due(self) -> bool:
        """Whether a group is ready: ``group_size`` results, or the oldest is old enough."""
        ready = len(self)
        if not ready:
            return False
        if ready >= self.group_size:
            return True
        assert self._since is not None
        return self._clock() - self._since >= self.group_seconds

    def seconds_to_write(self) -> float | None:
        """Seconds until the ready results are due to be written (None: nothing ready)."""
        if self._since is None:
            return None
        return max(0.0, self._since + self.group_seconds - self._clock())

    # --- the write ---------------------------------------------------------------------

    def take(self) -> Written:
        """The ready results, taken out of the group for their write."""
        out = Written(self._jobs, self._outcomes, self._expired, self._released)
        self._jobs, self._outcomes, self._expired, self._released = [], [], [], []
        self._since = None
        return out

    def write(self, out: Written, now: datetime, *, held: Collection[int] = ()) -> None:
        """Write ``out`` (from ``take``) in one fenced transaction; set ``out.lost``.
        ``held``: the shards this poller reads (``fanout_plan`` draws children on them)."""
        jobs, outcomes, expired = out.jobs, out.outcomes, out.expired
        failpoint("after_dispatch")  # fault tests: crash between delivery and write-back
        span = spans.batch_open("sendlater.write_back", owner=self.owner)  # None: tracing off
        started = self._clock()
        try:
            with bounded_atomic():
                results = results_build(jobs=jobs, outcomes=outcomes, expired=expired, now=now)
                # topic jobs: fanned_out, their children named
                fanout = fanout_plan(jobs=jobs, results=results, now=now, held=held)
                written = writeback.write_back(owner=self.owner, results=results, now=now)
                attempts_record(results=results, written=written, poller=self.owner, now=now)
                outcomes_heard(  # callbacks and kept responses, in this transaction
                    jobs=jobs,
                    outcomes=outcomes,
                    expired=expired,
                    results=results,
                    written=written,
                    now=now,
                )
                # topic children, here too
                fanout_write(fanout, written=written, now=now)
                done = self._batches_done(*out.groups())
                if len(written) != len(results):  # fenced out: the next owner forgets those
                    done -= {job.batch for job in (*jobs, *expired) if job.id not in written}
                writeback.inflight_forget(done)
                slots_give(owner=self.owner, counts=_slots(*out.groups()))
        finally:
            spans.batch_close(span, jobs, expired)
        self._warn_if_slow(self._clock() - started, len(results))
        metrics.WRITEBACK_GROUP.observe(len(results))
        writeback.outcomes_export(results, written, now)
        self._endpoints_health(jobs, results, written, now)
        if len(written) == len(results):
            return
        out.lost = {job.shard for job in (*jobs, *expired) if job.id not in written}
        metrics.FENCED_REJECTED.inc(len(results) - len(written))
        logger.warning(
            "poller %s: %s of %s results fenced out (lease lost) on shards %s",
            self.owner,
            len(results) - len(written),
            len(results),
            sorted(out.lost),
            extra={"shards": sorted(out.lost)},
        )

    def _warn_if_slow(self, seconds: float, results: int) -> None:
        """Say so when a write held the poller's thread past a lease renewal: a slow
        statement (a plan gone wrong, a lock wait) the lease may not survive."""
        if seconds > self.slow_seconds:
            metrics.WRITEBACK_SLOW.inc()
            logger.warning(
                "poller %s: a write-back of %s results took %.1fs; leases are renewed"
                " every %.0fs, not during it (slow statements: docs/postgres.md)",
                self.owner,
                results,
                seconds,
                self.slow_seconds,
            )

    def _endpoints_health(
        self,
        jobs: list[ClaimedJob],
        results: list[writeback.Result],
        written: set[UUID],
        now: datetime,
    ) -> None:
        """Topic endpoints' health, after the commit: a failure here is logged, and the
        next delivery to the endpoint records it again."""
        try:
            endpoints_health(jobs=jobs, results=results, written=written, now=now)
        except Exception:
            logger.exception("poller %s: recording topic endpoints' health failed", self.owner)

    def _batches_done(self, *groups: Sequence[ClaimedJob]) -> set[int]:
        """Count ``groups``' jobs off their batches; return the batches now all written."""
        left = self._batch_left
        touched = set()
        for group in groups:
            for job in group:
                left[job.batch] -= 1
                touched.add(job.batch)
        done = {batch for batch in touched if left[batch] <= 0}
        for batch in done:
            del left[batch]
        return done

    def clear(self) -> None:
        """Drop every result unwritten (the leases are gone)."""
        self._jobs, self._outcomes, self._expired, self._released = [], [], [], []
        self._since = None
        self._batch_left.clear()


def _slots(*groups: Sequence[ClaimedJob]) -> dict[int, int]:
    """Flow-control slots the jobs of ``groups`` held, per FlowControl id."""
    counts: Counter[int] = Counter()
    for group in groups:
        for job in group:
            if job.flow:
                counts[job.flow] += 1
    return counts
