"""Two ``runpoller`` processes and one receiving host: one budget for both.

The host's cap (``SENDLATER_WEBHOOK_MAX_PER_HOST``) holds for the two pollers together
(the receiver never has more at once), both send, nothing is written back but the
deliveries (no job put back while the host is busy), and when one poller leaves
(SIGTERM) the other takes the whole cap.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

from django.db import connection

from polling.models import HostShare
from scheduling.jobs.services import JobSpec, job_schedule_many
from scheduling.models import DeliveryAttempt, Job
from scheduling.sharding.clock import db_now
from tests.support.factories import team_create
from tests.support.procs import POLLER_PROCESSES, ROOT, child_env
from tests.support.receiver import running_receiver

pytestmark = POLLER_PROCESSES

CAP = 4
JOBS = 400


def start_poller(name: str, tmp_path) -> subprocess.Popen:
    env = child_env(
        SENDLATER_LEASE_SECONDS="3",
        SENDLATER_POLL_INTERVAL_SECONDS="0.2",
        SENDLATER_CALLBACK_ALLOWLIST="127.0.0.1",
        SENDLATER_WEBHOOK_MAX_PER_HOST=str(CAP),
        SENDLATER_DB_POOL="false",
    )
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(
        [sys.executable, "manage.py", "runpoller", "--name", name, "--batch-size", "50"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


class ShareWatch:
    """Samples the published shares: the most they ever added up to, who had some."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.most = 0
        self.owners: set[str] = set()
        self.last: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                rows = dict(HostShare.objects.filter(host=self.host).values_list("owner", "share"))
                self.last = rows
                self.most = max(self.most, sum(rows.values()))
                self.owners |= {owner for owner, share in rows.items() if share}
                time.sleep(0.02)
        finally:
            connection.close()

    def __enter__(self) -> ShareWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def wait_for(predicate, timeout: float, what: str, logs) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n" + logs())
        time.sleep(0.05)


def test_two_pollers_share_one_hosts_cap_and_one_leaving_gives_the_other_all(
    tmp_path, settings
) -> None:
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    team = team_create(slug="budget")
    pollers: list[subprocess.Popen] = []

    def logs() -> str:
        return "\n".join(p.read_text()[-3000:] for p in sorted(tmp_path.glob("*.log")))

    with running_receiver() as rx:
        host = f"127.0.0.1:{rx.port}"
        due = db_now() + timedelta(seconds=4)  # both pollers hold their shards by then
        specs = [
            JobSpec(due_at=due, target_kind="webhook", target=rx.url("/slow/0.05"))
            for _ in range(JOBS)
        ]
        job_schedule_many(team=team, specs=specs)
        try:
            pollers = [start_poller(f"b{i}", tmp_path) for i in range(2)]
            with ShareWatch(host) as watch:
                wait_for(lambda: len(rx.requests) >= JOBS // 3, 60, "a third delivered", logs)
                shared = dict(watch.last)
                pollers[1].send_signal(signal.SIGTERM)
                assert pollers[1].wait(timeout=30) == 0, logs()
                wait_for(lambda: watch.last.get("b0") == CAP, 10, "b0 takes the cap", logs)
                wait_for(
                    lambda: Job.objects.filter(status="delivered").count() == JOBS,
                    60,
                    "every job delivered",
                    logs,
                )
        finally:
            for poller in pollers:
                if poller.poll() is None:
                    poller.send_signal(signal.SIGTERM)
                    poller.wait(timeout=30)

    assert watch.owners == {"b0", "b1"}, shared  # both sent to the host
    assert watch.most <= CAP  # the shares never added up past the cap
    assert rx.most_active <= CAP  # nor did the requests the host saw at once
    ids = [r.headers["webhook-id"] for r in rx.requests]
    assert len(ids) == len(set(ids)) == JOBS  # SIGTERM handed back, nothing twice
    # Written once each, as delivered: nothing was put back while the host was busy.
    assert set(Job.objects.values_list("status", "attempts")) == {("delivered", 1)}
    assert not DeliveryAttempt.objects.exists()
    assert not HostShare.objects.exists()  # each poller gave its shares up as it stopped
