"""Callbacks across a poller killed (kill -9, a failpoint's ``os._exit``) around the
outcome that causes them (issue 31): none lost, none sent for an outcome not written.

- Killed between the delivery and its write-back: no callback exists (the outcome
  was not written); the heir delivers the job again, writes the outcome and its one
  callback together, and delivers the callback.
- Killed right after the write-back committed (the callback written, not yet sent):
  the heir delivers the callback.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

from scheduling.jobs.requests import DeliveryRequest
from scheduling.jobs.services import job_schedule
from scheduling.models import Job
from scheduling.sharding.clock import db_now
from tests.e2e.test_webhook_crash import start_poller
from tests.support.factories import team_create
from tests.support.procs import POLLER_PROCESSES
from tests.support.receiver import running_receiver

pytestmark = POLLER_PROCESSES


def _job_with_callback(team, rx):
    job, _ = job_schedule(
        team=team,
        due_at=db_now() + timedelta(seconds=1),
        target_kind="webhook",
        target=rx.url("/ok?parent"),
        payload={"n": 1},
        request=DeliveryRequest(on_success_url=rx.url("/ok?callback")),
    )
    return job


def _callbacks(job) -> list[Job]:
    return list(Job.objects.filter(metadata__callback_of=str(job.id)))


def _heir_delivers(tmp_path, rx, job) -> None:
    heir = start_poller("heir", tmp_path)
    try:
        deadline = time.monotonic() + 40
        while not any("callback" in path for path in rx.paths()) or not all(
            c.status == "delivered" for c in _callbacks(job)
        ):
            assert time.monotonic() < deadline, (tmp_path / "heir.log").read_text()
            time.sleep(0.2)
    finally:
        heir.terminate()
        heir.wait(timeout=20)


def test_killed_before_the_write_back_no_callback_then_exactly_one(tmp_path, settings) -> None:
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    team = team_create(slug="cb-before")
    with running_receiver() as rx:
        job = _job_with_callback(team, rx)
        doomed = start_poller("doomed", tmp_path, SENDLATER_FAILPOINTS="after_dispatch=exit")
        assert doomed.wait(timeout=30) == 137, (tmp_path / "doomed.log").read_text()
        assert rx.paths() == ["/ok?parent"]
        assert Job.objects.get(id=job.id).status == "pending" and _callbacks(job) == []
        _heir_delivers(tmp_path, rx, job)
    (callback,) = _callbacks(job)
    assert Job.objects.get(id=job.id).request["callbacks"] == {"job.delivered": str(callback.id)}
    sent = [r for r in rx.requests if r.path == "/ok?callback"]
    assert len(sent) == 1 and json.loads(sent[0].body)["job_id"] == str(job.id)


def test_killed_after_the_outcome_committed_the_callback_is_still_sent(tmp_path, settings) -> None:
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    team = team_create(slug="cb-after")
    with running_receiver() as rx:
        job = _job_with_callback(team, rx)
        doomed = start_poller("doomed", tmp_path, SENDLATER_FAILPOINTS="callbacks_committed=exit")
        assert doomed.wait(timeout=30) == 137, (tmp_path / "doomed.log").read_text()
        assert rx.paths() == ["/ok?parent"]
        assert Job.objects.get(id=job.id).status == "delivered"
        (callback,) = _callbacks(job)
        assert callback.status == "pending"
        _heir_delivers(tmp_path, rx, job)
    assert Job.objects.get(id=callback.id).status == "delivered"
    assert [r.path for r in rx.requests].count("/ok?parent") == 1
    assert json.loads(next(r for r in rx.requests if r.path == "/ok?callback").body)["type"] == (
        "job.delivered"
    )
