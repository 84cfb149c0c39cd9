"""The sink interface: how a poller hands the jobs it read to a delivery target.

A pipelined sink takes jobs with ``submit(jobs, done)`` and returns at once; it
calls ``done(job, outcome)`` once per job, from any thread, as each delivery
completes (``polling.engine.pipeline`` collects them and writes them back in groups). A
simple sink has only ``deliver(jobs) -> outcomes`` and answers a batch before it
returns (test sinks, custom sinks); the pipeline runs it inline. Sinks must not
raise for a single job's failure: that is an Outcome with ``result="retry"`` (or
``"dead"`` when retrying cannot help, ``"deferred"`` when the job was not tried:
it goes back to pending without counting as an attempt, or, refused by its host's
open circuit breaker, waits in the poller's window, unwritten). Sinks are built as
``SinkClass(concurrency=n)`` (see ``polling.dispatch.router``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol
from uuid import UUID


# Not frozen: a frozen dataclass's __init__ costs ~2.2 us against ~0.8 us, per
# job of every batch. Treat it as read-only all the same.
@dataclass(slots=True)
class ClaimedJob:
    id: UUID
    team_id: int
    due_at: datetime
    bucket: datetime
    shard: int
    attempt: int  # this delivery's attempt number (the row's attempts + 1)
    target_kind: str  # "webhook" | "handler"
    target: str
    payload: Any
    metadata: dict[str, str]
    expires_at: datetime | None
    # An occurrence of a recurring schedule: which one, and its instant.
    schedule_id: UUID | None = None
    scheduled_for: datetime | None = None
    # The lease epoch it was read under (its write-back is fenced on it) and its
    # in-flight batch (``scheduling.models.InFlightBatch``).
    epoch: int = 0
    batch: int = 0
    # Flow control (``polling.flow.admission``): the job's key, the FlowControl id whose
    # slot it holds until its write-back (0: none) and its rate slot (None: now).
    flow_key: str | None = None
    flow: int = 0
    send_at: datetime | None = None
    send_gap: float = 0.0  # seconds between the key's slots (a late job keeps them apart)
    # The W3C trace context the job keeps (``scheduling.tracing``; None: none).
    trace_context: str | None = None
    # The delivery contract where it differs from the default webhook (``Job.request``,
    # ``scheduling.jobs.requests``: method, sealed headers, format, timeout, retry, ...).
    # Shared by the jobs of one read whose stored text is the same: never change it in place.
    request: dict[str, Any] | None = None


@dataclass(slots=True)  # not frozen, as ClaimedJob
class Outcome:
    job_id: UUID
    result: Literal["delivered", "retry", "dead", "deferred"]
    error: str = ""
    status_code: int | None = None
    retry_after_seconds: float | None = None  # target asked us to wait (Retry-After)
    started_at: datetime | None = None
    duration_seconds: float | None = None
    # The response, where it is kept (a failure; a success whose job asked for it, or
    # has a success callback): its Content-Type and a bounded excerpt of its body.
    content_type: str = ""
    excerpt: str | None = None
    # "deferred" by the host's open circuit breaker (no request was made): the pipeline
    # holds the job in its window until the cool-down ends (``HostLanes.hold``).
    breaker_open: bool = False


class _AboutAJob(Protocol):
    @property
    def job_id(self) -> UUID: ...


def answered_in_order(jobs: Sequence[ClaimedJob], answers: Sequence[_AboutAJob]) -> bool:
    """Whether ``answers[i]`` (an Outcome, a write-back Result) is about ``jobs[i]``, for all.

    Sinks answer in the batch's order with the job's own id object
    (``Outcome(job.id, ...)``), and results keep it, so this checks identity: no
    UUID hashing, which per job of every batch cost more than the matching itself.
    """
    return len(jobs) == len(answers) and all(
        a.job_id is j.id for j, a in zip(jobs, answers, strict=True)
    )


Done = Callable[[ClaimedJob, Outcome], None]


class Sink(Protocol):
    """A simple sink: answers the whole batch before it returns."""

    def deliver(self, jobs: Sequence[ClaimedJob]) -> list[Outcome]: ...

    def close(self) -> None: ...


class PipelinedSink(Protocol):
    """A sink that returns at once and reports each job's outcome as it completes."""

    def submit(self, jobs: Sequence[ClaimedJob], done: Done) -> None: ...

    def close(self) -> None: ...


def is_pipelined(sink: object) -> bool:
    return callable(getattr(sink, "submit", None))


def deliver_all(sink: PipelinedSink, jobs: Sequence[ClaimedJob]) -> list[Outcome]:
    """Submit ``jobs`` and wait for every outcome; in the jobs' order.

    For callers that want a batch answered whole (tests, ``deliver`` of the
    pipelined sinks); the poller itself never waits like this.
    """
    if not jobs:
        return []
    answers: dict[int, Outcome] = {}
    lock = threading.Lock()
    finished = threading.Event()
    position = {id(job): i for i, job in enumerate(jobs)}

    def done(job: ClaimedJob, outcome: Outcome) -> None:
        with lock:
            answers[position[id(job)]] = outcome
            if len(answers) == len(jobs):
                finished.set()

    sink.submit(jobs, done)
    finished.wait()
    return [answers[i] for i in range(len(jobs))]
