"""Per-host fairness: a concurrency cap and a circuit breaker for each target host.

One slow or failing endpoint must not stall a shard. Each host gets at most
``max_per_host`` deliveries at once; a host that fails ``failure_threshold`` times
in a row is skipped (its jobs retried later) for a cool-down that doubles on each
failed trial, up to ``max_cooldown``. After the cool-down one trial request goes
through (half-open); its success closes the breaker.

The breaker remembers the paths of the failures since the host's last success, or
since its last failed trial (``HostOpen.paths``): a refused job on one of them was
predicted to fail (the refusal counts as its attempt), one on another path was not
(it waits, untried). So a path that keeps failing its trials cannot make the
host's other paths count refusals as attempts for long.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class _Breaker:
    failures: int = 0
    open_until: float = 0.0
    cooldown: float = 0.0
    trial_in_flight: bool = False
    paths: set[str] = field(default_factory=set)  # failing since the last success or trial


_MAX_PATHS = 100  # failing paths remembered per host


def answer_fine(status: int | None) -> bool:
    """Whether an answer counts for its host (closes its breaker): it answered, and
    not 5xx or 429. A 4xx is the job's fault, not the host's."""
    return status is not None and status < 500 and status != 429


class HostOpen(Exception):
    """The host's breaker is open; ``retry_after`` seconds until it may be tried."""

    def __init__(self, host: str, retry_after: float, paths: frozenset[str] = frozenset()) -> None:
        super().__init__(f"circuit open for {host} after repeated failures")
        self.retry_after = retry_after
        self.paths = paths  # the URL paths that failed since the host's last success


class HostGuard:
    def __init__(
        self,
        *,
        max_per_host: int,
        failure_threshold: int,
        cooldown: float,
        max_cooldown: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_per_host = max_per_host
        self.failure_threshold = failure_threshold
        self.base_cooldown = cooldown
        self.max_cooldown = max_cooldown
        self.clock = clock
        self._lock = threading.Lock()
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._breakers: dict[str, _Breaker] = {}

    def _admit(self, host: str, *, probe: bool = False) -> bool:
        """Raise HostOpen if the breaker refuses; return True for a half-open trial.

        A probe only checks; it never takes the half-open trial.
        """
        with self._lock:
            breaker = self._breakers.get(host)
            if breaker is None or breaker.failures < self.failure_threshold:
                return False
            now = self.clock()
            if now < breaker.open_until or breaker.trial_in_flight:
                raise HostOpen(host, max(breaker.open_until - now, 1.0), frozenset(breaker.paths))
            if probe:
                return False
            breaker.trial_in_flight = True
            return True

    def settings(self) -> dict[str, float]:
        """The constructor's settings (to build the same guard in another process)."""
        return {
            "max_per_host": self.max_per_host,
            "failure_threshold": self.failure_threshold,
            "cooldown": self.base_cooldown,
            "max_cooldown": self.max_cooldown,
        }

    def check(self, host: str) -> None:
        """Raise HostOpen if the host's breaker is open (a probe: takes no trial)."""
        self._admit(host, probe=True)

    def admit(self, host: str) -> bool:
        """Let one request go to ``host``: True if it is the half-open trial.

        Raises HostOpen while the breaker is open. For callers that count their
        own slots (the transport's dispatcher thread); ``slot()`` also holds one.
        """
        return self._admit(host)

    def record(self, host: str, *, ok: bool, trial: bool = False, path: str = "") -> None:
        """An answer from ``host`` (``path``: the URL path of a failure)."""
        with self._lock:
            breaker = self._breakers.get(host)
            if ok:  # closed again (a healthy host's breaker: nothing to reset)
                if breaker is not None:
                    del self._breakers[host]
                return
            if breaker is None:
                breaker = self._breakers[host] = _Breaker()
            if trial:  # what fails now is the trial's path, not what failed before it
                breaker.trial_in_flight = False
                breaker.paths.clear()
            breaker.failures += 1
            if path and len(breaker.paths) < _MAX_PATHS:
                breaker.paths.add(path)
            if breaker.failures >= self.failure_threshold:
                breaker.cooldown = min(
                    self.max_cooldown,
                    breaker.cooldown * 2 if breaker.cooldown else self.base_cooldown,
                )
                breaker.open_until = self.clock() + breaker.cooldown

    def is_open(self, host: str) -> bool:
        with self._lock:
            breaker = self._breakers.get(host)
            return bool(breaker and breaker.failures >= self.failure_threshold)

    @contextmanager
    def slot(self, host: str) -> Iterator[bool]:
        """Hold one of the host's concurrency slots; yields True for a half-open trial.

        Raises HostOpen without waiting when the breaker is open.
        """
        with self._lock:
            semaphore = self._slots.setdefault(host, threading.BoundedSemaphore(self.max_per_host))
        self._admit(host, probe=True)  # fail fast without queueing behind the cap
        with semaphore:
            # The breaker may have opened while this delivery waited for a slot.
            yield self._admit(host)
