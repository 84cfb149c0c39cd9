"""gunicorn's threaded worker, sharing client connections evenly among the workers.

gunicorn's workers share one listening socket, and each worker's main thread waits
on it whatever its request threads are doing, so whichever wakes first takes a new
connection. Measured (docs/performance.md): 23 of 32 keep-alive clients ended on
one of five workers, whose two threads then served each of them a tenth as often as
the other workers served theirs, and the slowest clients set the p99.

Here each worker publishes how many connections it holds in a small table shared
by every worker (an anonymous shared mapping the arbiter makes before it forks) and
listens only while it holds at most one more than the fewest any listening worker
holds. A worker that stops listening because others hold fewer looks again every
``RECHECK_SECONDS`` (its own events wake it sooner), so a new connection waits at
most that long in the kernel's queue, and only in the moment the fewest-held worker
changes. A worker that has not said how many it holds for ``STALE_SECONDS`` (hung,
stopped) is passed over. nginx's ``accept_mutex`` and Envoy's exact connection
balance do this job.

The arbiter gives each worker a slot of the table before it forks (``slot_give``,
gunicorn's ``pre_fork`` hook) and takes it back when the worker exits
(``slot_take_back``, ``child_exit``); a worker that stops accepting for good
(shutting down, or recycled after ``max_requests``) marks its slot out itself at
once, so the others never wait on a worker that no longer listens. A worker with
no slot (the hooks not wired, or more workers alive than slots) behaves exactly
like gunicorn's ``gthread`` worker.
"""

from __future__ import annotations

import mmap
import time
from typing import Any

from gunicorn.workers.gthread import ThreadWorker

SLOTS = 256  # workers alive at once, old ones finishing after a reload included
OUT = 2**62  # a slot no listening worker holds (above any count)
# One more than the fewest: a burst of new connections finds every worker but the
# ones already two ahead listening. With none (only the fewest-held listen), the one
# that takes the last connection at the level stops listening too, and the burst
# waits for a recheck.
SLACK = 1
RECHECK_SECONDS = 0.01
# A worker's loop wakes at least once a second (gthread's select timeout) and says
# it is alive: one silent for longer (hung, stopped) is passed over, not waited on.
STALE_SECONDS = 2.0

# Per slot, the connections its worker holds and when it last said so (monotonic
# clock: one for the whole machine). Slot 0's count is how far the slots in use
# reach; workers use 1 .. SLOTS - 1.
_mapping = mmap.mmap(-1, SLOTS * 16)  # MAP_SHARED | MAP_ANONYMOUS: forks share it
_held = memoryview(_mapping)[: SLOTS * 8].cast("q")
_beats = memoryview(_mapping)[SLOTS * 8 :].cast("d")
_held[0] = 1
for _slot in range(1, SLOTS):
    _held[_slot] = OUT


def may_accept(held: Any, beats: Any, slot: int, now: float) -> bool:
    """Whether the worker in ``slot`` holds at most ``SLACK`` connections more than
    any listening one that has said so within ``STALE_SECONDS`` of ``now``."""
    mine = held[slot]
    if mine == OUT:
        return False
    fresh = now - STALE_SECONDS
    return all(held[s] + SLACK >= mine or beats[s] < fresh for s in range(1, held[0]))


def slot_give(server: Any, worker: Any) -> None:
    """gunicorn ``pre_fork`` (in the arbiter): a free slot for ``worker``, or none."""
    used = {getattr(w, "balance_slot", None) for w in server.WORKERS.values()}
    slot = next((s for s in range(1, SLOTS) if s not in used), None)
    worker.balance_slot = slot
    if slot is None:
        server.log.warning("more than %s workers alive: a worker runs unbalanced", SLOTS - 1)
        return
    _held[slot] = OUT
    _held[0] = max(_held[0], slot + 1)


def slot_take_back(server: Any, worker: Any) -> None:
    """gunicorn ``child_exit`` (in the arbiter): the exited worker's slot is free."""
    slot = getattr(worker, "balance_slot", None)
    if slot is not None:
        _held[slot] = OUT


class BalancedThreadWorker(ThreadWorker):
    """``gthread`` that accepts a connection only while it holds the fewest."""

    balance_slot: int | None = None
    _held_back = False

    def set_accept_enabled(self, enabled: bool) -> None:
        slot = self.balance_slot
        if slot is not None:
            if self.alive:
                now = time.monotonic()
                _held[slot], _beats[slot] = self.nr_conns, now
                wanted = enabled
                enabled = enabled and may_accept(_held, _beats, slot, now)
                self._held_back = wanted and not enabled
            else:  # for good: the others must not wait on this worker
                _held[slot] = OUT
                enabled = self._held_back = False
        super().set_accept_enabled(enabled)

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        # gunicorn's loop asks again only when its own answer changes; the shares
        # change with every worker's accepts and closes, so look at each wake.
        self.set_accept_enabled(self.alive and self.nr_conns < self.worker_connections)
        if self._held_back:
            timeout = min(timeout, RECHECK_SECONDS)
        super().wait_for_and_dispatch_events(timeout)
