"""A topic job across a poller killed around its fan-out (issue 32): every endpoint gets
the job, none twice beyond what was in flight when the poller died.

- Killed between reading the topic job and its write-back: no child exists (the
  fan-out is written with the parent's outcome); the heir fans it out once.
- Killed right after the fan-out committed (children written, none sent): the heir
  delivers each child once.
- Killed with the fan-out half delivered (two endpoints answered and written back,
  the third's request in flight): the heir delivers only the third, at most once more.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

from scheduling.jobs.services import job_schedule
from scheduling.models import Job
from scheduling.sharding.clock import db_now
from scheduling.topics.services import EndpointSpec, topic_put
from tests.e2e.test_webhook_crash import start_poller
from tests.support.factories import team_create
from tests.support.procs import POLLER_PROCESSES
from tests.support.receiver import running_receiver

pytestmark = POLLER_PROCESSES


def _topic_job(slug: str, rx, paths: dict[str, str]) -> Job:
    team = team_create(slug=slug)
    endpoints = [EndpointSpec(name=n, url=rx.url(f"{p}?e={n}")) for n, p in paths.items()]
    topic_put(team=team, name="orders", endpoints=endpoints)
    job, _ = job_schedule(
        team=team,
        due_at=db_now() + timedelta(seconds=1),
        target_kind="topic",
        target="orders",
        payload={"order": 1},
    )
    return job


def _children(job: Job) -> list[Job]:
    return list(Job.objects.filter(request__topic_of=str(job.id)))


def _received(rx) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in rx.paths():
        name = path.split("e=")[-1]
        counts[name] = counts.get(name, 0) + 1
    return counts


def _heir_delivers(tmp_path, job: Job, expected: int) -> None:
    heir = start_poller("heir", tmp_path)
    try:
        deadline = time.monotonic() + 45
        while True:
            children = _children(job)
            if len(children) == expected and all(c.status == "delivered" for c in children):
                break
            assert time.monotonic() < deadline, (tmp_path / "heir.log").read_text()
            time.sleep(0.2)
    finally:
        heir.terminate()
        heir.wait(timeout=20)


def _each_once(job: Job, rx, names: set[str]) -> None:
    children = _children(job)
    assert {c.request["endpoint"] for c in children} == names  # one child per endpoint
    row = Job.objects.get(id=job.id)
    assert row.status == "fanned_out"
    assert row.request["children"] == {c.request["endpoint"]: str(c.id) for c in children}


def test_killed_before_the_write_back_no_child_then_one_fan_out(tmp_path, settings) -> None:
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    with running_receiver() as rx:
        job = _topic_job("tp-before", rx, {"a": "/ok", "b": "/ok", "c": "/ok"})
        doomed = start_poller("doomed", tmp_path, SENDLATER_FAILPOINTS="after_dispatch=exit")
        assert doomed.wait(timeout=30) == 137, (tmp_path / "doomed.log").read_text()
        assert Job.objects.get(id=job.id).status == "pending" and _children(job) == []
        _heir_delivers(tmp_path, job, 3)
    _each_once(job, rx, {"a", "b", "c"})
    assert _received(rx) == {"a": 1, "b": 1, "c": 1}


def test_killed_after_the_fan_out_committed_each_child_once(tmp_path, settings) -> None:
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    with running_receiver() as rx:
        job = _topic_job("tp-after", rx, {"a": "/ok", "b": "/ok", "c": "/ok"})
        doomed = start_poller("doomed", tmp_path, SENDLATER_FAILPOINTS="fanout_committed=exit")
        assert doomed.wait(timeout=30) == 137, (tmp_path / "doomed.log").read_text()
        assert rx.paths() == []
        assert {c.status for c in _children(job)} == {"pending"} and len(_children(job)) == 3
        _heir_delivers(tmp_path, job, 3)
    _each_once(job, rx, {"a", "b", "c"})
    assert _received(rx) == {"a": 1, "b": 1, "c": 1}


def test_killed_half_delivered_only_the_one_in_flight_goes_again(tmp_path, settings) -> None:
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    with running_receiver() as rx:
        job = _topic_job("tp-half", rx, {"a": "/ok", "b": "/ok", "slow": "/slow/4"})
        doomed = start_poller("doomed", tmp_path)
        deadline = time.monotonic() + 30
        while True:  # a and b written back, the slow one's request out
            done = {c.request["endpoint"] for c in _children(job) if c.status == "delivered"}
            if done == {"a", "b"} and "slow" in _received(rx):
                break
            assert time.monotonic() < deadline, (tmp_path / "doomed.log").read_text()
            time.sleep(0.05)
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=10)
        _heir_delivers(tmp_path, job, 3)
    _each_once(job, rx, {"a", "b", "slow"})
    got = _received(rx)
    assert got["a"] == 1 and got["b"] == 1
    assert 1 <= got["slow"] <= 2  # at most the one in flight, again
