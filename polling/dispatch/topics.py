"""A topic job's "delivery": nothing is sent. Its outcome is ``delivered`` at once, and
the write-back turns it into one child job per endpoint (``polling.writing.fanout``),
in the transaction that writes it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from polling.dispatch.base import ClaimedJob, Outcome


class TopicSink:
    """The sink of target kind ``topic``: answers every job delivered, sends nothing."""

    def __init__(self, concurrency: int = 1) -> None:
        del concurrency  # nothing runs beside the poller's thread

    def deliver(self, jobs: Sequence[ClaimedJob]) -> list[Outcome]:
        now = datetime.now(UTC)
        return [Outcome(job.id, "delivered", started_at=now, duration_seconds=0.0) for job in jobs]

    def close(self) -> None:
        return None
