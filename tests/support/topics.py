"""Topic jobs in the tests (tests/integration/test_topics.py, test_endpoint_health.py):
one scheduled, its children by endpoint, the receiver's requests by endpoint, a poller
run over a few instants."""

from __future__ import annotations

from datetime import datetime, timedelta

from polling.engine.poller import Poller
from scheduling.jobs.requests import DeliveryRequest
from scheduling.jobs.services import job_schedule
from scheduling.models import Job, Team
from tests.support.receiver import Received, Receiver


def topic_job(team: Team, due: datetime, *, topic: str = "orders", **request) -> Job:
    job, _ = job_schedule(
        team=team,
        due_at=due,
        target_kind="topic",
        target=topic,
        payload={"order": 42},
        metadata={"order": "o-42"},
        request=DeliveryRequest(**request) if request else None,
        now=due - timedelta(minutes=1),
    )
    return job


def children_of(job: Job) -> dict[str, Job]:
    job.refresh_from_db()
    named = (job.request or {}).get("children", {})
    return {name: Job.objects.get(id=child) for name, child in named.items()}


def by_endpoint(rx: Receiver) -> dict[str, list[Received]]:
    out: dict[str, list[Received]] = {}
    for received in rx.requests:
        out.setdefault(received.path.split("e=")[-1], []).append(received)
    return out


def run(poller: Poller, base: datetime, seconds: list[int]) -> None:
    for step in seconds:
        poller.iterate(now=base + timedelta(seconds=step))
