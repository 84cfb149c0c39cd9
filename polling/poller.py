"""The poller loop: flow control only (assign, read, dispatch, write back, sleep, stop).

Each pass reads ``now`` from the database once; everything after it in the pass
uses that reading plus the local monotonic time elapsed since, so the loop never
trusts the machine's wall clock. Locking statements live in ``polling.claims``;
the deliveries in flight and their write-back in ``polling.pipeline``: a pass
reads due jobs (no per-row claim: the lease is the lock) while earlier jobs are
still being delivered, up to the poller's window, and writes each job once, in
groups, as outcomes arrive.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from polling import claims, conf, flowdraw, metrics, services
from polling.dbtime import DB_TIME, DatabaseTime
from polling.dispatch.base import PipelinedSink, Sink
from polling.heldkeys import HeldKeyReads
from polling.leasekeeping import LeaseKeeping
from polling.models import PollerState
from polling.pipeline import Pipeline
from polling.pipelinestages import WAIT_SLICE_SECONDS, PipelineStages
from polling.renewer import LeaseRenewer
from polling.schedules import schedules_materialize
from polling.sweeper import sweep_stranded
from polling.upkeep import StorageUpkeep
from scheduling import conf as scheduling_conf
from scheduling import keys
from scheduling.clock import db_now, is_closed
from scheduling.failover import connection_reset_if_broken
from scheduling.keys import EPOCH

logger = logging.getLogger(__name__)

# A failover (docs/ha.md) takes seconds: a poller retries at least this often, so it
# is back within one cap of the new primary's promotion.
FAILURE_BACKOFF_CAP_SECONDS = 5.0


class Poller(LeaseKeeping, HeldKeyReads, PipelineStages):
    """One poller: owns shards through leases and drains them oldest bucket first."""

    def __init__(
        self,
        *,
        name: str,
        sink: Sink | PipelinedSink,
        batch_size: int,
        poll_interval: float,
        sweep_every: float,
        host: str = "",
        pid: int = 0,
        version: str = "",
        clock: Callable[[], datetime] = db_now,
        window: int | None = None,
    ) -> None:
        self.name = name
        self.sink = sink
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.sweep_every = sweep_every
        self.host, self.pid, self.version = host, pid, version
        self.clock = clock
        self.lease_seconds = scheduling_conf.lease_seconds()
        self.width = scheduling_conf.bucket_seconds()
        self.leases: dict[int, int] = {}  # shard -> epoch I hold
        self.state = PollerState.ACTIVE
        self.stopping = threading.Event()
        self._known_shards = 0
        self._next_maintenance: datetime | None = None
        self._next_sweep = 0.0
        self.upkeep = StorageUpkeep(
            owner=name, lease_seconds=self.lease_seconds, poll_interval=poll_interval
        )
        self._standby_warned = False
        self._stranded = False
        self._time = DatabaseTime()  # this poller's reading; DB_TIME is the process's
        self._failures = 0  # consecutive failed iterations
        self.claimed_last = 0  # jobs the last iteration claimed
        self.next_due: datetime | None = None  # earliest pending due time it saw ahead
        self.pipeline = Pipeline(
            owner=name,
            sink=sink,
            window=window or conf.window(),
            group_size=conf.writeback_group(),
            group_seconds=conf.writeback_seconds(),
            stall_seconds=conf.dispatch_stall_seconds(),
            rescan_seconds=conf.rescan_seconds(),
        )
        self._releasing: set[int] = set()  # shards to give up once their jobs are written
        # The buckets a held flow-control key's jobs may lie in: after the least of my
        # shards' checkpoints, up to the open bucket (set by each pass).
        self._after_bucket = EPOCH
        self._open_bucket = EPOCH

    # --- time ------------------------------------------------------------------

    def _now(self) -> datetime:
        """The iteration's database time plus the monotonic time elapsed since."""
        return self._time.now()

    def _anchor(self, reading: datetime) -> None:
        """Take ``reading`` as the database's time now, here and for the sinks."""
        mono = time.monotonic()
        self._time.anchor(reading, mono)
        DB_TIME.anchor(reading, mono)  # what the sinks sign and stamp with (never early)

    # --- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        now = self.clock()
        services.poller_register(
            name=self.name,
            host=self.host,
            pid=self.pid,
            version=self.version,
            now=now,
            lease_seconds=self.lease_seconds,
        )
        # A previous run under this name holds no slots now; gone pollers' rows go too.
        flowdraw.slots_reset(owner=self.name, expired_before=now)
        logger.info("poller %s: registered (lease %ss)", self.name, self.lease_seconds)

    def stop(self) -> None:
        self.stopping.set()

    def run(self, *, once: bool = False) -> None:
        """Loop until ``stop()`` (or one pass with ``once``), then shut down cleanly."""
        renewer = LeaseRenewer.started(owner=self.name, lease_seconds=self.lease_seconds)
        try:
            while not self.stopping.is_set():
                started = time.monotonic()
                busy = self.step(settle=once)
                if once:
                    break
                if self._failures:
                    # The database is down or failing: back off, up to a cap.
                    delay = min(FAILURE_BACKOFF_CAP_SECONDS, self.poll_interval * 2**self._failures)
                    logger.warning(
                        "poller %s: %s failed iterations in a row; retrying in %.1fs",
                        self.name,
                        self._failures,
                        delay,
                    )
                    self.stopping.wait(delay)
                elif not busy:
                    self._wait(self._pause(time.monotonic() - started))
        finally:
            renewer.stop()
            self.shutdown()

    def _wait(self, seconds: float) -> None:
        """Wait ``seconds`` for the next pass, writing back outcomes as they arrive.

        Never raises: a write-back that fails here (the database went away) is
        handled like a failed pass.
        """
        deadline = time.monotonic() + seconds
        while not self.stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if not self.pipeline.in_flight:
                self.stopping.wait(remaining)
                return
            try:
                self._pump(wait=min(remaining, WAIT_SLICE_SECONDS))
            except Exception:
                self._fail("write-back between passes")
                return

    def _pause(self, elapsed: float) -> float:
        """How long to wait after an iteration that emptied every batch it claimed.

        Idle (nothing claimed): the poll interval, jittered. Jobs arriving (a burst
        spread over a minute): the interval less the iteration's own time, so passes
        start every interval rather than every interval plus a pass, which would add
        a whole pass to every job's lag. Either way no later than the earliest due
        time the pass saw ahead (``next_due``): a job fires at its time, not up to a
        poll interval after it.
        """
        pause = self.poll_interval * random.uniform(0.8, 1.2)  # noqa: S311
        if self.claimed_last:
            pause = max(0.0, pause - elapsed)
        if self.next_due is not None:
            # A pending job falls due before the pause ends: wake for it (not earlier
            # than a tenth of the interval, so a steady stream is still polled in passes).
            until = (self.next_due - self._now()).total_seconds()
            pause = min(pause, max(self.poll_interval / 10, until))
        gate = self.pipeline.gate
        if len(gate):
            # A held flow-control key may go again (its next rate slot, a slot back).
            recheck = gate.next_recheck()
            until = 0.0 if recheck is None else (recheck - self._now()).total_seconds()
            pause = min(pause, max(0.005, until))
        return pause

    def step(self, now: datetime | None = None, *, settle: bool = True) -> bool:
        """One iteration that never raises: on failure, give up every lease.

        Claims of this epoch may be stranded by the failure (say, a write-back that
        did not commit): dropping the leases makes the next owner, maybe this
        poller, take a new epoch and return them to pending.
        """
        try:
            busy = self.iterate(now, settle=settle)
        except Exception:
            self._fail("iteration")
            return False
        self._failures = 0
        return busy

    def _fail(self, what: str) -> None:
        """A pass, or a write-back between passes, failed: let go of every lease."""
        self._failures += 1
        metrics.POLLER_ERRORS.inc()
        logger.exception("poller %s: %s failed; dropping leases", self.name, what)
        connection_reset_if_broken()
        self._drop_all_leases()

    def shutdown(self) -> None:
        """Finish what is in flight (within the shutdown grace), write it back, let go."""
        grace = max(1.0, conf.shutdown_grace_seconds() - 2)
        try:
            self._settle(deadline=time.monotonic() + grace)
        except Exception:
            logger.exception("poller %s: could not write back what was in flight", self.name)
        if self.pipeline.in_flight:
            logger.warning(
                "poller %s: %s jobs still in flight at exit; their shards' next owners "
                "return them to pending",
                self.name,
                self.pipeline.in_flight,
            )
        self._drop_all_leases()
        try:
            services.poller_stop(name=self.name, now=self.clock())
        except Exception:
            logger.exception("poller %s: could not mark itself stopped", self.name)
        self.sink.close()
        logger.info("poller %s: stopped", self.name)

    def _drop_all_leases(self) -> None:
        """Release every lease this poller holds (all indices: owner = me is the filter).

        If that fails (database down), ``_stranded`` stays set and no lease is renewed
        until a release succeeds, so claims of the current epoch are never kept: the
        next owner takes a new epoch and returns them to pending.
        """
        try:
            released = claims.lease_release(owner=self.name, shards=range(self._known_shards))
        except Exception:
            logger.exception("poller %s: could not release leases", self.name)
            self._stranded = True
        else:
            self._stranded = False
            if released:
                logger.info("poller %s: released shards %s", self.name, released)
        self.leases = {}
        self._releasing = set()
        # Unwritten results are of epochs just given up: they would be fenced out.
        self.pipeline.forget()
        try:  # their flow-control slots too (they also lapse with the poller's leases)
            flowdraw.slots_reset(owner=self.name)
        except Exception:
            logger.exception("poller %s: could not give back flow-control slots", self.name)

    # --- one iteration -----------------------------------------------------------

    def iterate(self, now: datetime | None = None, *, settle: bool = True) -> bool:
        """One pass over owned shards; True if a full batch was claimed (more waits).

        ``settle``: before returning, wait for every job in flight and write it
        back (tests and ``--once``); the run loop passes False and keeps its window
        full across passes.
        """
        self.claimed_last, self.next_due = 0, None
        self._anchor(now or self.clock())
        self._pump()
        self._maintain()
        if self.stopping.is_set() or not self.leases:
            if settle:
                self._settle()
            return False
        now = self._now()
        self.upkeep.run(now, shards=sorted(self.leases))
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + self.sweep_every
            sweep_stranded(owner=self.name, now=now, width=self.width)
        schedules_materialize(owner=self.name, leases=self.leases, now=now)  # recurring
        open_bucket = keys.bucket_of(now, self.width)
        step = timedelta(seconds=self.width)
        last_closed = open_bucket - step if is_closed(open_bucket - step, now) else None
        last_closed = last_closed or open_bucket - 2 * step
        fronts = claims.frontier(
            shards=self.leases, open_bucket=open_bucket, held=self.pipeline.gate.excluded()
        )
        self._after_bucket = min((f.checkpoint or EPOCH for f in fronts.values()), default=EPOCH)
        targets: dict[int, tuple[int, datetime]] = {}
        for shard, front in fronts.items():
            target = min(last_closed, front.bucket - step) if front.bucket else last_closed
            if shard in self.leases and (front.checkpoint is None or target > front.checkpoint):
                targets[shard] = (self.leases[shard], target)
        if targets:
            moved = claims.checkpoint_advance(owner=self.name, targets=targets, now=now)
            if moved:
                logger.debug("poller %s: checkpoints advanced %s", self.name, moved)
        ahead = [f.next_due for f in fronts.values() if f.next_due and f.next_due > now]
        self.next_due = min(ahead, default=None)
        # Oldest bucket first; skip shards whose first bucket holds nothing due yet.
        work = sorted(
            (front.bucket, shard)
            for shard, front in fronts.items()
            if front.bucket and front.next_due and front.next_due <= now
        )
        busy = False
        self._open_bucket = open_bucket
        for bucket, shard in work:
            if self.stopping.is_set() or not self._room_for_a_batch():
                break
            self._renew_if_due()
            if shard not in self.leases or shard in self._releasing:
                continue
            limit = min(self.batch_size, self.pipeline.room())
            claimed = self._claim(bucket, shard, limit)
            self.claimed_last += claimed
            busy |= claimed >= limit
            self._pump()
            self._read_held_keys()  # a key's next slots do not wait for the whole pass
        self._read_held_keys()
        if settle:
            self._settle()
        return busy

    def _claim(self, bucket: datetime, shard: int, limit: int) -> int:
        """Read up to ``limit`` due jobs of ``(bucket, shard)`` into the pipeline.

        No row is claimed: the lease is the lock. The read starts past the jobs
        this poller already has in flight there (``polling.cursors``) and records
        the batch in flight; a lease found lost is let go.
        """
        now = self._now()
        read = self.pipeline.cursors.plan(shard, bucket, limit)
        try:
            jobs = claims.batch_take(
                owner=self.name,
                epoch=self.leases[shard],
                bucket=bucket,
                shard=shard,
                now=now,
                limit=limit,
                after=read.after,
                skip=read.skip,
                fetch=read.fetch,
                held=self.pipeline.gate.excluded(),
                slots_until=now + timedelta(seconds=self.lease_seconds),
            )
        except claims.LeaseLost:
            metrics.LEASES_LOST.inc()
            logger.warning("poller %s: lease of shard %s lost before a read", self.name, shard)
            self.leases.pop(shard, None)
            return 0
        except claims.WindowBusy:
            metrics.WINDOWS_BUSY.inc()
            logger.warning(
                "poller %s: shard %s: its window lock is held (a stopped poller's?);"
                " read again on a later pass",
                self.name,
                shard,
            )
            return 0
        self.pipeline.gate.hold(jobs.holds, now)
        if read.rescan_below is not None:
            self.pipeline.cursors.rescanned(shard, bucket, read, jobs)
        if not jobs:
            return 0
        metrics.CLAIM_BATCH.observe(len(jobs))
        self.pipeline.submit(jobs, now)
        logger.debug(
            "poller %s: shard %s bucket %s: %s read",
            self.name,
            shard,
            bucket,
            len(jobs),
            extra={"shard": shard, "bucket": bucket.isoformat(), "batch_size": len(jobs)},
        )
        return len(jobs)
