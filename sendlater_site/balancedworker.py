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

Connections made while workers boot (a ``HUP`` reload, a recycled worker's
clients reconnecting at once) go to the workers already listening. So a worker
holding ``SHED_AT`` (three) or more connections above the fewest, for longer than
``SHED_AFTER_SECONDS`` (not in a rush of new connections), answers a request with
``Connection: close`` (the whole answer first: nothing is cut off), one per
``SHED_AFTER_SECONDS`` until it holds fewer, and those clients' next connections
go to workers that hold fewer. Three, not two: a worker that listens may reach two
above the fewest by accepting, and a connection handed back must not be handed
back again by the worker it lands on.
"""

from __future__ import annotations

import mmap
import time
from typing import Any

from gunicorn.workers.gthread import ThreadWorker

SLOTS = 256  # workers alive at once, old ones finishing after a reload included
OUT = 2**62  # a slot no listening worker holds (above any count)
# A worker listens while it holds at most SLACK more than the fewest: a burst of new
# connections finds every worker but the ones already ahead listening. (With none,
# only the fewest-held listen, and the one that takes the last connection at that
# level stops listening too: the burst waits for a recheck.)
SLACK = 1
# A worker sheds connections while it holds SHED_AT or more above the fewest: more
# than a worker that listens can reach by accepting (SLACK + 1), so a connection
# shed never makes its next worker shed it again.
SHED_AT = SLACK + 2
RECHECK_SECONDS = 0.01
# A worker's loop wakes at least once a second (gthread's select timeout) and says
# it is alive: one silent for longer (hung, stopped) is passed over, not waited on.
STALE_SECONDS = 2.0
# ... and sheds only once it has been that far over this long (not in the moment of
# a rush of new connections, while the others' counts catch up), then one connection
# per that long.
SHED_AFTER_SECONDS = 0.1

# Per slot, the connections its worker holds and when it last said so (monotonic
# clock: one for the whole machine). Slot 0's count is how far the slots in use
# reach; workers use 1 .. SLOTS - 1.
_mapping = mmap.mmap(-1, SLOTS * 16)  # MAP_SHARED | MAP_ANONYMOUS: forks share it
_held = memoryview(_mapping)[: SLOTS * 8].cast("q")
_beats = memoryview(_mapping)[SLOTS * 8 :].cast("d")
_held[0] = 1
for _slot in range(1, SLOTS):
    _held[_slot] = OUT


def fewest(held: Any, beats: Any, now: float) -> int:
    """The fewest connections a listening worker holds that has said so within
    ``STALE_SECONDS`` of ``now`` (``OUT``: none)."""
    fresh = now - STALE_SECONDS
    return min((held[s] for s in range(1, held[0]) if beats[s] >= fresh), default=OUT)


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
    """``gthread`` that takes new connections only while it holds about the fewest,
    and hands some back while it holds clearly more."""

    balance_slot: int | None = None
    _held_back = False  # could take more, but others hold fewer
    _over_since: float | None = None  # since when it has held SHED_AT or more above

    def set_accept_enabled(self, enabled: bool) -> None:
        slot = self.balance_slot
        if slot is not None:
            if self.alive:
                now = time.monotonic()
                mine = _held[slot] = self.nr_conns
                _beats[slot] = now
                least = min(mine, fewest(_held, _beats, now))
                self._held_back = enabled and mine > least + SLACK
                enabled = enabled and not self._held_back
                if mine < least + SHED_AT:
                    self._over_since = None
                elif self._over_since is None:
                    self._over_since = now
            else:  # for good: the others must not wait on this worker
                _held[slot] = OUT
                enabled = self._held_back = False
                self._over_since = None
        super().set_accept_enabled(enabled)

    def load_wsgi(self) -> None:
        super().load_wsgi()
        app = self.wsgi

        def shedding(environ: dict[str, Any], start_response: Any) -> Any:
            # Clearly over its share: this response closes its connection
            # (``Connection: close``, after the whole answer), so the client's next
            # connection goes to a worker that holds fewer.
            # One connection per SHED_AFTER_SECONDS: all at once, the workers over
            # their share would pile their clients onto the one worker just up.
            since = self._over_since
            if since is not None:
                now = time.monotonic()
                if now - since >= SHED_AFTER_SECONDS:
                    self._over_since = now
                    start_response.__self__.force_close()  # gunicorn's Response
            return app(environ, start_response)

        self.wsgi = shedding

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        # gunicorn's loop asks again only when its own answer changes; the shares
        # change with every worker's accepts and closes, so look at each wake.
        self.set_accept_enabled(self.alive and self.nr_conns < self.worker_connections)
        if self._held_back:
            timeout = min(timeout, RECHECK_SECONDS)
        super().wait_for_and_dispatch_events(timeout)
