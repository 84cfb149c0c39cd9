"""One poller's webhooks per receiving host: what goes to the transport, what waits here.

A host may have, in the transport, what it can start soon: its share of the host's
concurrency (``polling.flow.host_shares``, the budget of the whole service) running,
and behind it what that share starts within ``queue_seconds`` at the host's measured
pace (``share * queue_seconds / latency``, the latency smoothed over its answers;
``share`` again before any answer). Beyond that a job is *parked* here, in the
window, untried and unwritten, and goes out in order as the host's answers come
back. A host at its limit is *busy*: the shard reads leave its jobs out
(``origin_patterns``), so its backlog stays pending in the database, costs no write
and never fills the window; when it has room again (half its limit) the reads take
it in again, from the start of each bucket (``freed``).

A job the transport refused because the host's circuit breaker is open (no request
was made) is *held*: put back at the head of its lane, untried and unwritten, and the
host's limit is 0 until the cool-down ends (so it is busy: the reads leave it out).
Then one job goes at a time (the breaker's half-open trial) until an answer that
closes the breaker comes back. A healthy host's jobs never lose attempts to a
breaker that another path of the host keeps tripping, and an open breaker costs no
writes (``hold``).

Only webhook jobs have a lane; other jobs pass straight through.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from polling.dispatch.base import ClaimedJob, Outcome
from polling.dispatch.hostguard import answer_fine
from polling.dispatch.hosts import host_key, origin_patterns, url_origin
from polling.flow.host_shares import REFRESH_SECONDS, shares_refresh

_LATENCY_WEIGHT = 0.2  # of each new answer in the smoothed latency
_IDLE_FORGET_SECONDS = 300.0  # a lane with nothing for this long is dropped
_URL_CACHE_SIZE = 100_000
_FIRST_SHARE_SECONDS = 0.02  # a host waiting for its first share refreshes this soon


@dataclass(slots=True)
class _Lane:
    share: int | None = None  # None: none asked for yet (the next refresh, at once)
    out: int = 0  # sent to the transport, not answered
    parked: deque[ClaimedJob] = field(default_factory=deque)
    latency: float = 0.0  # smoothed seconds per request; 0: none measured
    origins: set[str] = field(default_factory=set)  # "scheme://netloc" as the URLs write it
    busy: bool = False
    idle_since: float = 0.0
    held_until: float = 0.0  # monotonic: the breaker's cool-down; 0: not held
    requeued: int = 0  # held jobs at the head of ``parked`` (kept in the order sent)


class HostLanes:
    """Every method runs on the poller's thread."""

    def __init__(
        self,
        *,
        owner: str,
        cap: int,
        queue_seconds: float,
        window: int,
        apply_caps: Callable[[dict[str, int]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.owner = owner
        self.cap = max(1, cap)
        self.queue_seconds = queue_seconds
        self.window = window
        self.apply_caps = apply_caps
        self.clock = clock
        self._lanes: dict[str, _Lane] = {}
        # target URL -> (host key, origin): a cache, so a URL is parsed once, not per job
        self._hosts: dict[str, tuple[str, str]] = {}
        self._busy: set[str] = set()
        self._held: set[str] = set()  # hosts whose breaker refused a job (``hold``)
        self._excluded: list[str] | None = []  # None: to be rebuilt from _busy
        self._next_refresh = 0.0
        self._last_refresh = 0.0
        self._unshared = False  # a host with jobs waits for a share
        self.parked = 0  # jobs parked over every lane
        self.freed = False  # a host stopped being busy since the reads last looked

    # --- jobs in and out ----------------------------------------------------------

    def split(self, jobs: Iterable[ClaimedJob]) -> list[ClaimedJob]:
        """Of ``jobs`` (to be sent), those that go now; the others are parked in order."""
        now: list[ClaimedJob] = []
        lanes = self._lanes
        touched: dict[str, int] = {}  # host -> its limit (the same for the whole split)
        for job in jobs:
            if job.target_kind != "webhook":
                now.append(job)
                continue
            host, origin = self._host_of(job.target)
            lane = lanes.get(host)
            if lane is None:
                lane = lanes[host] = _Lane()
                self._unshared = True
            limit = touched.get(host)
            if limit is None:
                limit = touched[host] = self.limit(lane)
                lane.origins.add(origin)
            elif origin not in lane.origins:
                lane.origins.add(origin)
            if lane.parked or lane.out >= limit:
                lane.parked.append(job)
                self.parked += 1
                if lane.share is None:
                    self._unshared = True
            else:
                lane.out += 1
                now.append(job)
        for host in touched:
            self._mark(host, lanes[host])
        return now

    def answered(self, job: ClaimedJob, outcome: Outcome) -> None:
        if job.target_kind != "webhook":
            return
        host = self._host_of(job.target)[0]
        lane = self._lanes.get(host)
        if lane is None:
            return
        lane.out = max(0, lane.out - 1)
        if lane.held_until and answer_fine(outcome.status_code) and not self._cooling(lane):
            lane.held_until = 0.0  # the breaker's trial went through: open the lane again
            self._held.discard(host)
        if lane.busy:
            self._mark(host, lane)
        took = outcome.duration_seconds
        if took and took > 0:
            lane.latency = (
                took
                if not lane.latency
                else (1 - _LATENCY_WEIGHT) * lane.latency + _LATENCY_WEIGHT * took
            )
        if not lane.out and not lane.parked:
            lane.idle_since = self.clock()

    def hold(self, job: ClaimedJob, retry_after: float | None) -> bool:
        """The transport refused ``job`` (its host's breaker is open, for ``retry_after``
        seconds): park it again at the head of its lane, unwritten and not an attempt,
        and hold the host until then. False: ``job`` has no lane (write it deferred)."""
        if job.target_kind != "webhook":
            return False
        host = self._host_of(job.target)[0]
        lane = self._lanes.get(host)
        if lane is None:
            return False
        lane.out = max(0, lane.out - 1)
        lane.parked.insert(lane.requeued, job)
        lane.requeued += 1
        self.parked += 1
        lane.held_until = max(lane.held_until, self.clock() + max(retry_after or 0.0, 0.05))
        self._held.add(host)
        self._mark(host, lane)
        return True

    def drop_held(self) -> list[ClaimedJob]:
        """Take out the jobs parked behind a breaker's cool-down that has not ended
        (a settling pass): never sent, they go back as they are, untouched rows."""
        dropped: list[ClaimedJob] = []
        for host in self._held:
            lane = self._lanes[host]
            if lane.parked and self._cooling(lane):
                dropped.extend(lane.parked)
                lane.parked, lane.requeued = deque(), 0
                self._mark(host, lane)
        self.parked -= len(dropped)
        return dropped

    def _cooling(self, lane: _Lane) -> bool:
        """Whether ``lane``'s host is within its breaker's cool-down."""
        return bool(lane.held_until) and self.clock() < lane.held_until

    def _host_of(self, target: str) -> tuple[str, str]:
        known = self._hosts.get(target)
        if known is None:
            if len(self._hosts) >= _URL_CACHE_SIZE:
                self._hosts.clear()
            known = self._hosts[target] = (host_key(target)[0], url_origin(target))
        return known

    def ready(self) -> list[ClaimedJob]:
        """Parked jobs whose host has room now (in the order they were read)."""
        if self._held:  # a cool-down that ended frees its host for a trial
            for host in self._held:
                lane = self._lanes[host]
                if not lane.parked and not self._cooling(lane):
                    self._mark(host, lane)
        if not self.parked:
            return []
        go: list[ClaimedJob] = []
        for host, lane in self._lanes.items():
            if not lane.parked:
                continue
            limit = self.limit(lane)
            while lane.parked and lane.out < limit:
                go.append(lane.parked.popleft())
                lane.out += 1
                self.parked -= 1
                lane.requeued = max(0, lane.requeued - 1)
            self._mark(host, lane)
        return go

    def drop_parked(self, keep: Callable[[ClaimedJob], bool] | None = None) -> list[ClaimedJob]:
        """Take the parked jobs out (all, or those ``keep`` refuses): they were never
        sent, so they go back as they are, untouched rows."""
        dropped: list[ClaimedJob] = []
        for host, lane in self._lanes.items():
            if not lane.parked:
                continue
            kept: deque[ClaimedJob] = deque()
            for job in lane.parked:
                (kept if keep is not None and keep(job) else dropped).append(job)
            lane.parked, lane.requeued = kept, 0
            self._mark(host, lane)
        self.parked -= len(dropped)
        return dropped

    def limit(self, lane: _Lane) -> int:
        """Jobs the host may have in the transport: its share running and what that
        share starts within ``queue_seconds``. A held host: none until its cool-down
        ends, then one (the breaker's trial) until an answer comes back."""
        share = lane.share
        if not share:
            return 0
        if lane.held_until:
            return 0 if self._cooling(lane) else 1
        if not lane.latency:
            return min(self.window, 2 * share)
        return min(self.window, share + int(share * self.queue_seconds / lane.latency))

    def _mark(self, host: str, lane: _Lane) -> None:
        """Busy at the limit; room again at half of it (``freed``: the reads look again)."""
        held = lane.out + len(lane.parked)
        limit = self.limit(lane)
        # A host that may fill the whole window is never left out: the window bounds it,
        # and it drains within queue_seconds anyway.
        if not lane.busy and held >= limit and limit < self.window and lane.share is not None:
            lane.busy = True
            self._busy.add(host)
            self._excluded = None
        elif lane.busy and held <= limit // 2 and not lane.parked and not self._cooling(lane):
            lane.busy = False
            self._busy.discard(host)
            self._excluded = None
            self.freed = True

    def excluded(self) -> list[str]:
        """``LIKE`` patterns of the busy hosts' URLs (the shard reads leave them out)."""
        if self._excluded is None:
            lanes = self._lanes
            self._excluded = origin_patterns(
                origin for host in self._busy for origin in lanes[host].origins
            )
        return self._excluded

    # --- the shared budget --------------------------------------------------------

    def refresh_due(self) -> bool:
        if not self._lanes:
            return False
        clock = self.clock()
        if self._unshared:
            return clock >= self._last_refresh + _FIRST_SHARE_SECONDS
        return clock >= self._next_refresh

    def refresh(self, now: datetime) -> None:
        """Publish this poller's demand per host and take its shares (one transaction);
        the transport is told each share that changed."""
        clock = self.clock()
        self._next_refresh = clock + REFRESH_SECONDS
        self._last_refresh = clock
        lanes = self._lanes
        for host in [h for h, lane in lanes.items() if self._idle(lane, clock)]:
            del lanes[host]
            self._busy.discard(host)
            self._held.discard(host)
            self._excluded = None
        demand = {
            host: (lane.out + len(lane.parked), lane.share or 0) for host, lane in lanes.items()
        }
        shares = shares_refresh(owner=self.owner, lanes=demand, cap=self.cap, now=now)
        if shares is None:  # the budget's lock was busy: keep what there is, try later
            self._last_refresh = clock + REFRESH_SECONDS
            return
        changed: dict[str, int] = {}
        for host, lane in lanes.items():
            share = shares.get(host)  # None: no demand, none asked for
            if share != lane.share:
                lane.share = share
                if share is not None:
                    changed[host] = share
            self._mark(host, lane)
        self._unshared = False
        if changed and self.apply_caps is not None:
            self.apply_caps(changed)

    def _idle(self, lane: _Lane, clock: float) -> bool:
        return (
            not lane.out
            and not lane.parked
            and lane.idle_since > 0
            and clock - lane.idle_since > _IDLE_FORGET_SECONDS
        )

    def forget(self) -> None:
        """Nothing is in flight any more (the window was dropped): counts start afresh."""
        for host, lane in self._lanes.items():
            lane.out, lane.parked, lane.requeued = 0, deque(), 0
            self._mark(host, lane)
        self.parked = 0

    def shares(self) -> dict[str, int | None]:
        """``{host: share}`` (tests, the console)."""
        return {host: lane.share for host, lane in self._lanes.items()}
