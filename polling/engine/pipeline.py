"""The dispatch pipeline: a bounded window of deliveries in flight, written back in groups.

Three stages, all driven from the poller's own thread (the only one that touches
its database connection):

1. **submit** — jobs read (``polling.reading.take.batch_take``) enter the window and go
   to the sink, which returns at once (a pipelined sink) and reports each outcome
   from its own thread as the delivery ends. Jobs already expired never reach the sink.
2. **collect** — outcomes that have arrived move from the sink's threads to the
   ready list (a queue between threads); a job in flight for longer than the
   stall limit is given up as a retry, so a handler that never returns holds one
   slot, never the shard's progress.
3. **write back** — the ready results are written in one fenced transaction when
   ``group_size`` are ready or the oldest has waited ``group_seconds``
   (``polling.engine.write_group``).

The window (``window`` jobs: read and not yet written back) bounds what a crash
can deliver twice. Each write is fenced per row on the lease epoch the job was
read under, so results of a shard whose lease was lost are refused and reported.
The read cursors (``polling.reading.cursors``) keep the next read of a shard past the
jobs it already has in flight, which are still pending rows.
"""

from __future__ import annotations

import heapq
import logging
import queue
import time
from collections import Counter
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta

from polling import conf, metrics
from polling.dispatch.base import ClaimedJob, Outcome, is_pipelined
from polling.engine.write_group import WriteGroup
from polling.flow.gate import FlowGate
from polling.flow.host_lanes import HostLanes
from polling.ownership.renewer import PROGRESS
from polling.reading.cursors import ReadCursors

logger = logging.getLogger(__name__)

# A poller that falls behind its rate slots (a busy CPU) sends at most this much of
# a key's slots at once; the rest keep their spacing behind them.
_LATE = timedelta(seconds=0.25)


class Pipeline:
    """One poller's jobs in flight; every method runs on the poller's thread."""

    def __init__(
        self,
        *,
        owner: str,
        sink: object,
        window: int,
        group_size: int,
        group_seconds: float,
        stall_seconds: float,
        rescan_seconds: float = 1.0,
        host_cap: int | None = None,
        queue_seconds: float | None = None,
    ) -> None:
        self.owner = owner
        self.sink = sink
        self.window = max(1, window)
        self.stall_seconds = stall_seconds
        self._arrived: queue.SimpleQueue[tuple[ClaimedJob, Outcome]] = queue.SimpleQueue()
        # Sent and not yet answered, in the order sent: id -> (job, monotonic time sent).
        self._sent: dict[object, tuple[ClaimedJob, float]] = {}
        self.ready = WriteGroup(owner=owner, group_size=group_size, group_seconds=group_seconds)
        self.by_shard: Counter[int] = Counter()  # jobs in the window per shard
        self.cursors = ReadCursors(rescan_seconds)
        self.gate = FlowGate()
        self.hosts = HostLanes(
            owner=owner,
            cap=host_cap or conf.webhook_max_per_host(),
            queue_seconds=queue_seconds or conf.webhook_queue_seconds(),
            window=self.window,
            apply_caps=getattr(sink, "host_caps", None),
        )
        # Jobs of rate-limited keys waiting for their slot: (send_at, order, job).
        self._timed: list[tuple[datetime, int, ClaimedJob]] = []
        self._timed_order = 0
        self._last_sent: dict[int, datetime] = {}  # FlowControl id -> its last slot sent

    # --- state --------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Jobs in the window: sent, or answered and not yet written back."""
        return len(self._sent) + len(self.ready) + len(self._timed) + self.hosts.parked

    def room(self) -> int:
        return self.window - self.in_flight

    @property
    def all_answered(self) -> bool:
        """Nothing is out with the sink or waiting for its slot or its host (what is in
        the window only awaits its write)."""
        return not self._sent and not self._timed and not self.hosts.parked

    def busy_shards(self) -> set[int]:
        return {shard for shard, count in self.by_shard.items() if count}

    # --- 1. submit ------------------------------------------------------------------

    def submit(self, jobs: Sequence[ClaimedJob], now: datetime, *, shard_read: bool = True) -> None:
        """Put read ``jobs`` in the window and hand the live ones to the sink.

        ``shard_read`` False: the jobs come from a held key's read (``ReadCursors.handed``).
        """
        live: list[ClaimedJob] = []
        self.cursors.handed(jobs, shard_read=shard_read)
        self.gate.handed(jobs)
        self.ready.read(jobs)
        for job in jobs:
            self.by_shard[job.shard] += 1
            if job.expires_at is not None and job.expires_at <= now:
                self.ready.expired(job)
            elif job.send_at is not None and job.send_at > now:
                self._timed_order += 1
                heapq.heappush(self._timed, (job.send_at, self._timed_order, job))
            else:
                live.append(job)
        self._send(live)

    def send_due(self, now: datetime) -> None:
        """Hand the jobs whose rate slot has come to the sink.

        A job whose slot passed while the poller was busy keeps its key's spacing
        behind the key's last job sent here: late slots never go out as one burst.
        """
        timed = self._timed
        if not timed or timed[0][0] > now:
            return
        due = []
        last = self._last_sent
        while timed and timed[0][0] <= now:
            at, order, job = heapq.heappop(timed)
            previous = last.get(job.flow)
            if previous is not None:
                at = max(at, previous + timedelta(seconds=job.send_gap))
            if at < now - _LATE:  # far behind (a busy poller): no more than _LATE at once
                at = now - _LATE
            if at > now:
                heapq.heappush(timed, (at, order, job))
                continue
            last[job.flow] = at
            due.append(job)
        self._send(due)

    def seconds_to_send(self, now: datetime) -> float | None:
        """Seconds until the next rate slot of a job waiting for one (None: none waits)."""
        if not self._timed:
            return None
        return max(0.0, (self._timed[0][0] - now).total_seconds())

    def send_parked(self, now: datetime) -> None:
        """Send the jobs parked for a busy host that has room now (expired ones are
        written expired instead)."""
        ready = self.hosts.ready()
        if not ready:
            return
        live = []
        for job in ready:
            if job.expires_at is not None and job.expires_at <= now:
                self.hosts.answered(job, Outcome(job.id, "dead"))  # its place in the lane
                self.ready.expired(job)
            else:
                live.append(job)
        self._dispatch(live)

    def release_parked(self, shards: set[int] | None = None) -> int:
        """Hand back the parked jobs (of ``shards``, or all): never sent, their rows are
        left as they are and their in-flight batches forgotten at the next write
        (a poller stopping, shards given up). Returns how many."""
        if not self.hosts.parked:
            return 0
        keep = None if shards is None else (lambda job: job.shard not in shards)
        return self._release(self.hosts.drop_parked(keep))

    def release_held(self) -> int:
        """Hand back the jobs held for a host's breaker cool-down (unwritten, as
        ``release_parked``): a settling pass does not wait out a cool-down."""
        if not self.hosts.parked:
            return 0
        return self._release(self.hosts.drop_held())

    def _release(self, dropped: list[ClaimedJob]) -> int:
        """``dropped`` (parked, never sent) goes back unwritten at the next write."""
        self.ready.released(dropped)
        return len(dropped)

    def _send(self, live: list[ClaimedJob]) -> None:
        """Send ``live`` (each webhook only as its host has room: ``HostLanes``)."""
        if live:
            self._dispatch(self.hosts.split(live))

    def _dispatch(self, live: list[ClaimedJob]) -> None:
        if not live:
            return
        sent_at = time.monotonic()
        for job in live:
            self._sent[job.id] = (job, sent_at)
        metrics.IN_FLIGHT.set(self.in_flight)
        if is_pipelined(self.sink):
            self.sink.submit(live, self._done)  # type: ignore[attr-defined]
            return
        # A simple sink answers the whole group before it returns: the lease renewer
        # keeps the leases while its deliveries progress.
        with PROGRESS.dispatching_batch():
            outcomes = self.sink.deliver(live)  # type: ignore[attr-defined]
        by_id = {o.job_id: o for o in outcomes}
        for job in live:
            self._done(job, by_id.get(job.id) or Outcome(job.id, "retry", error="no outcome"))

    def _done(self, job: ClaimedJob, outcome: Outcome) -> None:
        """The sink's report, from any thread."""
        self._arrived.put((job, outcome))

    # --- 2. collect -----------------------------------------------------------------

    def collect(self, timeout: float = 0.0) -> int:
        """Take the outcomes that have arrived; wait up to ``timeout`` s for a first one.

        Returns how many outcomes were taken. An outcome for a read no longer in
        flight (given up as stalled, reported twice, or forgotten with the leases) is
        ignored.
        """
        taken = 0
        arrived = self._arrived
        if timeout > 0 and not self._sent and arrived.empty():
            time.sleep(timeout)  # nothing out: wait what the caller asked (a write or a slot)
        try:
            if timeout > 0 and arrived.empty() and self._sent:
                item = arrived.get(timeout=timeout)
            else:
                item = arrived.get_nowait()
            while True:
                taken += self._take(*item)
                item = arrived.get_nowait()
        except queue.Empty:
            pass
        taken += self._give_up_stalled()
        return taken

    def _take(self, job: ClaimedJob, outcome: Outcome) -> int:
        # The outcome of this very read (its batch), not of an earlier read of the same
        # job: a delivery still out when the window was forgotten (leases dropped)
        # reports later, while the job's next read, under a new epoch, is out again.
        # Taking that one's place would leave the new read unwritten, and its job
        # free for a third delivery.
        sent = self._sent.get(job.id)
        if sent is None or sent[0].batch != job.batch:
            return 0
        del self._sent[job.id]
        if outcome.breaker_open and self.hosts.hold(job, outcome.retry_after_seconds):
            metrics.BREAKER_HELD.inc()  # back in the window, untried: nothing to write
            return 1
        self.hosts.answered(job, outcome)
        self.ready.answered(job, outcome)
        return 1

    def _give_up_stalled(self) -> int:
        """Retry the jobs in flight for longer than the stall limit (oldest first).

        A job whose own ``timeout_seconds`` is longer than the service's limit waits
        that long (and a little for its answer): the transport cuts its request then.
        """
        if not self._sent:
            return 0
        now = time.monotonic()
        limit = now - self.stall_seconds
        stalled = []
        for job, sent_at in self._sent.values():  # in the order sent: stop at a young one
            if sent_at > limit:
                break
            own = _own_stall_seconds(job)
            if sent_at + own > now:
                continue  # its own, longer timeout has not run out
            stalled.append((job, max(own, self.stall_seconds)))
        for job, seconds in stalled:
            logger.warning(
                "poller %s: job %s (shard %s) had no outcome within %.0fs; retrying it",
                self.owner,
                job.id,
                job.shard,
                seconds,
                extra={"shard": job.shard, "job": str(job.id)},
            )
            error = f"no outcome within {seconds:.0f}s (delivery stalled)"
            self._take(job, Outcome(job.id, "retry", error=error))
        return len(stalled)

    # --- 3. write back --------------------------------------------------------------

    def write_due(self) -> bool:
        """Whether a group is ready: ``group_size`` results, or the oldest is old enough."""
        return self.ready.due()

    def seconds_to_write(self) -> float | None:
        """Seconds until the ready results are due to be written (None: nothing ready)."""
        return self.ready.seconds_to_write()

    def write_back(self, now: datetime, *, held: Collection[int] = ()) -> set[int]:
        """Write every ready result in one fenced transaction; return shards found lost.
        ``held``: the shards this poller reads (a topic's children are drawn on them).

        A result refused by the fence (the lease changed hands since the read) is
        dropped: the row is still pending, and the shard's new owner delivers it.
        """
        group = self.ready.take()
        if not group:
            return set()
        try:
            self.ready.write(group, now, held=held)
        finally:  # written or not, these jobs have left the window
            for jobs in group.groups():
                for job in jobs:
                    self.by_shard[job.shard] -= 1
                self.cursors.resolved(jobs)
                self.gate.resolved(jobs)
            metrics.IN_FLIGHT.set(self.in_flight)
        return group.lost

    def forget(self) -> int:
        """Drop everything in the window unwritten (the leases are gone: the rows are
        still pending, and the shards' next owners forget these batches and read them
        again). Returns how many jobs were dropped."""
        dropped = self.in_flight
        self._sent.clear()
        while not self._arrived.empty():  # their outcomes (more may come: _take drops them)
            self._arrived.get_nowait()
        self.ready.clear()
        self._timed.clear()
        self.hosts.forget()
        self.by_shard.clear()
        self.cursors.clear()
        self.gate.clear()
        metrics.IN_FLIGHT.set(0)
        return dropped


# What a job's own timeout is given beyond itself for its answer to come back.
OWN_TIMEOUT_GRACE_SECONDS = 5.0


def _own_stall_seconds(job: ClaimedJob) -> float:
    """How long ``job`` may be in flight by its own ``timeout_seconds`` (0: none)."""
    timeout = job.request.get("timeout_seconds") if job.request else None
    return float(timeout) + OWN_TIMEOUT_GRACE_SECONDS if timeout else 0.0
