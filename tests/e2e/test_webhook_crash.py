"""A poller killed between a webhook's 2xx and its write-back: exactly one duplicate.

The first poller runs with the ``after_dispatch=exit`` failpoint: it claims the job,
the receiver answers 200, and the process dies (``os._exit``, like kill -9) before
writing the result back. A second poller takes the shard over after the lease
expires, returns the stale claim to pending and delivers again: the receiver sees
the job twice, with the same ``webhook-id``; the database says delivered once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import timedelta

from standardwebhooks.webhooks import Webhook

from polling.models import ShardLease
from scheduling.jobs.inflight import job_in_flight
from scheduling.jobs.selectors import delivery_attempt_list
from scheduling.jobs.services import job_schedule
from scheduling.models import DeliveryAttempt, Job
from scheduling.sharding.clock import db_now
from tests.support.factories import team_create
from tests.support.procs import POLLER_PROCESSES, ROOT, child_env
from tests.support.receiver import running_receiver

pytestmark = POLLER_PROCESSES


def start_poller(name: str, tmp_path, **extra: str) -> subprocess.Popen:
    env = child_env(
        SENDLATER_LEASE_SECONDS="3",
        SENDLATER_POLL_INTERVAL_SECONDS="0.2",
        SENDLATER_CALLBACK_ALLOWLIST="127.0.0.1",
        SENDLATER_DB_POOL="false",
        **extra,
    )
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(
        [sys.executable, "manage.py", "runpoller", "--name", name],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def test_crash_after_delivery_duplicates_once_with_the_same_webhook_id(tmp_path, settings) -> None:
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    team = team_create(slug="crash")
    with running_receiver() as rx:
        job, _ = job_schedule(
            team=team,
            due_at=db_now() + timedelta(seconds=1),
            target_kind="webhook",
            target=rx.url("/ok"),
            payload={"n": 1},
        )
        doomed = start_poller("doomed", tmp_path, SENDLATER_FAILPOINTS="after_dispatch=exit")
        assert doomed.wait(timeout=30) == 137, (tmp_path / "doomed.log").read_text()
        assert len(rx.requests) == 1
        row = Job.objects.get(id=job.id)
        assert row.status == "pending" and job_in_flight(row)  # delivered, not written back

        heir = start_poller("heir", tmp_path)
        try:
            deadline = time.monotonic() + 30
            while Job.objects.get(id=job.id).status != "delivered":
                assert time.monotonic() < deadline, (tmp_path / "heir.log").read_text()
                time.sleep(0.2)
        finally:
            heir.terminate()
            heir.wait(timeout=20)

    row = Job.objects.get(id=job.id)
    assert row.attempts == 1  # the one write: the heir's
    assert not job_in_flight(row)  # the heir forgot the doomed poller's batch
    assert len(rx.requests) == 2  # exactly one duplicate
    first, second = rx.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == str(job.id)
    # The same attempt twice: nothing was written between them.
    assert [r.json()["attempt"] for r in rx.requests] == [1, 1]
    for request in rx.requests:
        Webhook(team.signing_secret).verify(request.body, request.headers)
    # Only the write-back that happened is an attempt: a delivery, kept on the row.
    assert not DeliveryAttempt.objects.filter(job=job).exists()
    assert [(a.attempt, a.result) for a in delivery_attempt_list(job=row)] == [(1, "delivered")]


def test_sigterm_with_deliveries_in_flight_finishes_and_writes_them_back(
    tmp_path, settings
) -> None:
    """SIGTERM while webhooks are out: the poller claims nothing more, waits for the
    replies, writes them back, releases its leases and exits 0. Nothing is sent twice."""
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    team = team_create(slug="sigterm")
    with running_receiver() as rx:
        due = db_now() + timedelta(seconds=1)
        jobs = [
            job_schedule(team=team, due_at=due, target_kind="webhook", target=rx.url("/slow/2"))[0]
            for _ in range(3)
        ]
        poller = start_poller("graceful", tmp_path)
        try:
            deadline = time.monotonic() + 30
            while len(rx.requests) < len(jobs):
                assert time.monotonic() < deadline, (tmp_path / "graceful.log").read_text()
                time.sleep(0.05)
            rows = [Job.objects.get(id=j.id) for j in jobs]
            assert {r.status for r in rows} == {"pending"} and all(map(job_in_flight, rows))
            poller.send_signal(signal.SIGTERM)
            assert poller.wait(timeout=20) == 0, (tmp_path / "graceful.log").read_text()
        finally:
            if poller.poll() is None:
                poller.kill()
    assert {Job.objects.get(id=j.id).status for j in jobs} == {"delivered"}
    assert len(rx.requests) == len(jobs)
    assert not DeliveryAttempt.objects.filter(job_id__in=[j.id for j in jobs]).exists()
    assert all(Job.objects.get(id=j.id).last_status_code == 200 for j in jobs)
    assert not ShardLease.objects.filter(owner="graceful").exists()
