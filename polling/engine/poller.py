"""The poller loop: flow control only (assign, read, dispatch, write back, sleep, stop).

Each pass reads ``now`` from the database once; everything after it in the pass
uses that reading plus the local monotonic time elapsed since, so the loop never
trusts the machine's wall clock. The poller holds its parts and calls them: the
lease keeper (``polling.ownership.keeper``), the shard and held-key readers
(``polling.reading``), the dispatch window and its pump (``polling.engine``). A
pass reads due jobs (no per-row claim: the lease is the lock) while earlier jobs
are still being delivered, up to the poller's window, and writes each job once,
in groups, as outcomes arrive.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime

from polling import conf, metrics
from polling.common.database_time import DB_TIME, DatabaseTime
from polling.common.wakeups import WakeListener, Wakeup
from polling.dispatch.base import PipelinedSink, Sink
from polling.engine.pipeline import Pipeline
from polling.engine.pump import WAIT_SLICE_SECONDS, Pump
from polling.flow import admission, host_shares
from polling.ownership import registration
from polling.ownership.keeper import LeaseKeeper
from polling.ownership.renewer import LeaseRenewer
from polling.reading.held_keys import HeldKeyReader
from polling.reading.shard_reads import ShardReader
from polling.upkeep.schedules import schedules_materialize
from polling.upkeep.storage import StorageUpkeep
from polling.writing.sweep import sweep_stranded
from scheduling import conf as scheduling_conf
from scheduling.sharding.clock import db_now
from scheduling.storage.failover import connection_reset_if_broken

logger = logging.getLogger(__name__)

# A failover (docs/ha.md) takes seconds: a poller retries at least this often, so it
# is back within one cap of the new primary's promotion.
FAILURE_BACKOFF_CAP_SECONDS = 5.0
# An idle poller waiting for its next pass looks at ``stopping`` this often.
STOP_CHECK_SECONDS = 0.25


class Poller:
    """One poller: owns shards through leases and drains them oldest bucket first.

    Its parts, each with its own state: ``ownership`` (the leases), ``pipeline``
    (the deliveries in flight) and ``pump`` (which moves it between reads),
    ``shard_reads`` and ``key_reads`` (due jobs into the pipeline), ``upkeep``.
    """

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
        self.stopping = threading.Event()
        # Jobs just written due now into a shard of ours (a callback, a topic's child):
        # the next pass starts at once (``polling.common.wakeups``).
        self.wakeup = Wakeup()
        self._next_sweep = 0.0
        self._time = DatabaseTime()  # this poller's reading; DB_TIME is the process's
        self._failures = 0  # consecutive failed iterations
        self.claimed_last = 0  # jobs the last iteration claimed
        self.upkeep = StorageUpkeep(
            owner=name, lease_seconds=self.lease_seconds, poll_interval=poll_interval
        )
        self.pipeline = Pipeline(
            owner=name,
            sink=sink,
            window=window or conf.window(),
            group_size=conf.writeback_group(),
            group_seconds=conf.writeback_seconds(),
            stall_seconds=conf.dispatch_stall_seconds(),
            rescan_seconds=conf.rescan_seconds(),
        )
        self.ownership = LeaseKeeper(
            name=name,
            lease_seconds=self.lease_seconds,
            register=self.start,
            on_renew=self._flow_slots_renew,
        )
        self.pump = Pump(
            pipeline=self.pipeline,
            keeper=self.ownership,
            now=self._now,
            stopping=self.stopping,
            batch_size=batch_size,
        )
        self.shard_reads = ShardReader(
            name=name, keeper=self.ownership, window=self.pipeline, now=self._now, width=self.width
        )
        self.key_reads = HeldKeyReader(
            name=name,
            keeper=self.ownership,
            window=self.pipeline,
            shards=self.shard_reads,
            now=self._now,
            stopping=self.stopping,
            room_for_a_batch=self.pump.room_for_a_batch,
            batch_size=batch_size,
        )

    @property
    def leases(self) -> dict[int, int]:
        """``{shard: epoch}`` this poller holds."""
        return self.ownership.leases

    @property
    def next_due(self) -> datetime | None:
        """The earliest pending due time the last pass saw ahead of now."""
        return self.shard_reads.next_due

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
        registration.poller_register(
            name=self.name,
            host=self.host,
            pid=self.pid,
            version=self.version,
            now=now,
            lease_seconds=self.lease_seconds,
        )
        # A previous run under this name holds no slots now; gone pollers' rows go too.
        admission.slots_reset(owner=self.name, expired_before=now)
        logger.info("poller %s: registered (lease %ss)", self.name, self.lease_seconds)

    def stop(self) -> None:
        self.stopping.set()

    def run(self, *, once: bool = False) -> None:
        """Loop until ``stop()`` (or one pass with ``once``), then shut down cleanly."""
        renewer = LeaseRenewer.started(owner=self.name, lease_seconds=self.lease_seconds)
        listener = WakeListener.started(wakeup=self.wakeup, name=self.name)
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
                    self._wait(self._pause(time.monotonic() - started), since=started)
        finally:
            if listener is not None:
                listener.stop()
            renewer.stop()
            self.shutdown()

    def _wait(self, seconds: float, *, since: float | None = None) -> None:
        """Wait ``seconds`` for the next pass, writing back outcomes as they arrive.

        A wake-up (jobs just written due now into one of this poller's shards) ends
        the wait, though not sooner than a tenth of the poll interval after the pass
        that began at ``since`` (monotonic): a stream of wake-ups still polls in passes.
        Never raises: a write-back that fails here (the database went away) is
        handled like a failed pass.
        """
        now = time.monotonic()
        deadline = now + seconds
        earliest = (now if since is None else since) + self.poll_interval / 10
        while not self.stopping.is_set():
            now = time.monotonic()
            woken = self.wakeup.relevant(self.leases)
            if woken:
                deadline = min(deadline, earliest)
            remaining = deadline - now
            if remaining <= 0:
                return
            if self.pipeline.in_flight:
                try:
                    self.pump.pump(wait=min(remaining, WAIT_SLICE_SECONDS))
                except Exception:
                    self._fail("write-back between passes")
                    return
            elif woken:
                self.stopping.wait(remaining)
            else:  # in slices: a stop (a signal handler sets ``stopping``) ends it too
                self.wakeup.wait(min(remaining, STOP_CHECK_SECONDS))

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
        # Jobs parked for a busy host were never sent: they go back as they are.
        released = self.pipeline.release_parked()
        if released:
            logger.info("poller %s: %s jobs parked for busy hosts handed back", self.name, released)
        try:
            self.pump.settle(deadline=time.monotonic() + grace)
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
            registration.poller_stop(name=self.name, now=self.clock())
        except Exception:
            logger.exception("poller %s: could not mark itself stopped", self.name)
        self.sink.close()
        logger.info("poller %s: stopped", self.name)

    def _drop_all_leases(self) -> None:
        """Release every lease (``LeaseKeeper.release_all``) and forget what is in flight."""
        self.ownership.release_all()
        # Unwritten results are of epochs just given up: they would be fenced out.
        self.pipeline.forget()
        try:  # their flow-control slots too (they also lapse with the poller's leases)
            admission.slots_reset(owner=self.name)
        except Exception:
            logger.exception("poller %s: could not give back flow-control slots", self.name)
        try:  # and its shares of the hosts' budgets (they also lapse when not refreshed)
            host_shares.shares_release(owner=self.name)
        except Exception:
            logger.exception("poller %s: could not give back its hosts' shares", self.name)

    def _flow_slots_renew(self, until: datetime) -> None:
        """The flow-control slots this poller holds live as long as its leases."""
        if self.pipeline.gate.has_slots():
            admission.slots_renew(owner=self.name, until=until)

    def _maintain(self) -> None:
        """Heartbeat, renew, and move toward the assignment (after a failed release,
        first release again: nothing is renewed until that succeeds)."""
        if self.ownership.stranded:
            self._drop_all_leases()
            if self.ownership.stranded:
                return
        if self.ownership.releasing:  # parked jobs need not hold a shard being given up
            self.pipeline.release_parked(self.ownership.releasing)
        self.ownership.maintain(
            self._now(), busy=self.pipeline.busy_shards, stopping=self.stopping.is_set()
        )

    # --- one iteration -----------------------------------------------------------

    def iterate(self, now: datetime | None = None, *, settle: bool = True) -> bool:
        """One pass over owned shards; True if a full batch was claimed (more waits).

        ``settle``: before returning, wait for every job in flight and write it
        back (tests and ``--once``); the run loop passes False and keeps its window
        full across passes.
        """
        self.claimed_last, self.shard_reads.next_due = 0, None
        woken, anywhere = self.wakeup.take()  # this pass reads what was written before it
        if woken or anywhere:  # ... behind its cursors too
            self.pipeline.cursors.woken(None if anywhere else woken)
        self._anchor(now or self.clock())
        self.pump.pump()
        self._maintain()
        if self.stopping.is_set() or not self.leases:
            if settle:
                self.pump.settle()
            return False
        now = self._now()
        self.upkeep.run(now, shards=sorted(self.leases))
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + self.sweep_every
            sweep_stranded(owner=self.name, now=now, width=self.width)
        schedules_materialize(owner=self.name, leases=self.leases, now=now)  # recurring
        busy = False
        for bucket, shard in self.shard_reads.plan(now):
            if self.stopping.is_set() or not self.pump.room_for_a_batch():
                break
            self.ownership.renew_if_due(self._now())
            if shard not in self.leases or shard in self.ownership.releasing:
                continue
            limit = min(self.batch_size, self.pipeline.room())
            claimed = self.shard_reads.read(bucket, shard, limit)
            self.claimed_last += claimed
            busy |= claimed >= limit
            self.pump.pump()
            # A key's next slots do not wait for the whole pass.
            self.claimed_last += self.key_reads.read_due()
        self.claimed_last += self.key_reads.read_due()
        if settle:
            self.pump.settle()
        return busy
