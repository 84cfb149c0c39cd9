"""Helpers for poller tests: a recording sink and a poller on a controlled clock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from polling.dispatch.base import ClaimedJob, Outcome
from polling.engine.poller import Poller
from scheduling import keys
from scheduling.sharding.clock import db_now


class RecordingSink:
    """Delivers everything (or fails the ids in ``fail``) and remembers the order."""

    def __init__(self, *, fail: set | None = None, dead: set | None = None) -> None:
        self.seen: list[ClaimedJob] = []
        self.fail = fail or set()
        self.dead = dead or set()

    def deliver(self, jobs: Sequence[ClaimedJob]) -> list[Outcome]:
        self.seen.extend(jobs)
        out = []
        for job in jobs:
            if job.id in self.dead:
                out.append(Outcome(job.id, "dead", error="gone"))
            elif job.id in self.fail:
                out.append(Outcome(job.id, "retry", error="boom", status_code=503))
            else:
                out.append(Outcome(job.id, "delivered", status_code=200))
        return out

    def close(self) -> None:
        pass


def future_base(days: int = 1) -> datetime:
    """A bucket boundary a day ahead: a private stretch of time for one test."""
    return keys.bucket_of(db_now() + timedelta(days=days), 60)


def poller_build(name: str = "p1", *, sink=None, batch_size: int = 100, sweep_every: float = 3600):
    poller = Poller(
        name=name,
        sink=sink or RecordingSink(),
        batch_size=batch_size,
        poll_interval=0.05,
        sweep_every=sweep_every,
        host="test",
        pid=1,
    )
    poller.start()
    return poller
