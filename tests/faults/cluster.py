"""The fault suite's system under test: gunicorn, three pollers, a receiver.

Every process is real and reads the test database: gunicorn (API submissions),
``runpoller`` processes (optionally with failpoints or a skewed wall clock) and
the webhook receiver in this process. Short lease, poll interval and bucket
width make a scenario last seconds; the test process's settings are set to the
same values, so services called in-process (operator moves, cutovers) agree.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connection

from scheduling.sharding.clock import db_now
from scheduling.storage.partitions import partitions_ensure, partitions_missing
from tests.faults.receiver import FaultReceiver
from tests.support.procs import ROOT, child_env

# Ports 8500-8549 are this suite's (SENDLATER_FAULTS_PORT_BASE moves them, for runs
# side by side on one machine; SENDLATER_FAULTS_PORT_SPAN narrows them): gunicorn on
# the first 25, the receiver 25 above it.
PORT_BASE = int(os.environ.get("SENDLATER_FAULTS_PORT_BASE", "8500"))
RECEIVER_PORT_OFFSET = int(os.environ.get("SENDLATER_FAULTS_PORT_SPAN", "25"))
_PORTS = itertools.cycle(range(PORT_BASE, PORT_BASE + RECEIVER_PORT_OFFSET))

LEASE_SECONDS = 3
POLL_SECONDS = 0.2
BUCKET_SECONDS = 5
BATCH_SIZE = 25
READ_TIMEOUT_SECONDS = 1.0
RETRY_BASE_SECONDS = 0.5
RETRY_CAP_SECONDS = 2.0
MAX_ATTEMPTS = 8
BREAKER_MAX_COOLDOWN_SECONDS = 2.0
# A scenario lasts minutes and retries back off 2 s at most: partitions from the day
# before to two days ahead cover every bucket it writes, even across midnight.
PARTITION_AHEAD_DAYS = 2

# The test process gets these as Django settings, the children as environment.
SETTINGS: dict[str, Any] = {
    "SENDLATER_LEASE_SECONDS": LEASE_SECONDS,
    "SENDLATER_POLL_INTERVAL_SECONDS": POLL_SECONDS,
    "SENDLATER_BUCKET_SECONDS": BUCKET_SECONDS,
    "SENDLATER_CLOSE_GRACE_SECONDS": 1,
    "SENDLATER_CUTOVER_MARGIN_SECONDS": 5,
    "SENDLATER_SWEEP_SECONDS": 1.0,
    "SENDLATER_BATCH_SIZE": BATCH_SIZE,
    "SENDLATER_CONCURRENCY": 8,
    "SENDLATER_RETRY_BASE_SECONDS": RETRY_BASE_SECONDS,
    "SENDLATER_RETRY_CAP_SECONDS": RETRY_CAP_SECONDS,
    "SENDLATER_MAX_ATTEMPTS": MAX_ATTEMPTS,
    "SENDLATER_WEBHOOK_CONNECT_TIMEOUT_SECONDS": 1.0,
    "SENDLATER_WEBHOOK_READ_TIMEOUT_SECONDS": READ_TIMEOUT_SECONDS,
    "SENDLATER_BREAKER_FAILURES": 5,
    "SENDLATER_BREAKER_COOLDOWN_SECONDS": 0.5,
    "SENDLATER_BREAKER_MAX_COOLDOWN_SECONDS": BREAKER_MAX_COOLDOWN_SECONDS,
    "SENDLATER_SHUTDOWN_GRACE_SECONDS": 10,
    "SENDLATER_PARTITION_AHEAD_DAYS": PARTITION_AHEAD_DAYS,
}
CHILD_ENV = {
    **{name: str(value) for name, value in SETTINGS.items()},
    "SENDLATER_CALLBACK_ALLOWLIST": "127.0.0.1",
    "SENDLATER_THROTTLE_JOBS": "1000000/min",
    "SENDLATER_THROTTLE_JOBS_BULK": "1000000/min",
    "SENDLATER_DB_POOL": "false",
    "DEBUG": "false",
    "SECURE_SSL_REDIRECT": "false",
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "GUNICORN_WORKERS": "2",
    "GUNICORN_THREADS": "4",
    "GUNICORN_ACCESS_LOG": "/dev/null",
}


@dataclass
class FaultWindow:
    """When a fault was on (unix seconds) and how many rows were in flight then."""

    what: str
    start: float
    end: float = 0.0
    in_flight: int = 0
    jobs: list[str] = field(default_factory=list)  # their ids (hex), where the fault knows
    note: str = ""


@dataclass
class Cluster:
    tmp: Path
    api_key: str
    receiver: FaultReceiver
    api_port: int = 0
    web: subprocess.Popen | None = None
    pollers: dict[str, subprocess.Popen] = field(default_factory=dict)
    faults: list[FaultWindow] = field(default_factory=list)

    # --- processes ---------------------------------------------------------------

    def start_web(self) -> None:
        self.api_port = next(_PORTS)
        log = open(self.tmp / "gunicorn.log", "w")  # noqa: SIM115 (closed with the process)
        self.web = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "sendlater_site.wsgi"],
            cwd=ROOT,
            env=child_env(**CHILD_ENV, GUNICORN_BIND=f"127.0.0.1:{self.api_port}"),
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def start_poller(self, name: str, *, failpoints: str = "", skew_seconds: float = 0) -> None:
        env = child_env(**CHILD_ENV)
        # Named connections, so a scenario can terminate exactly the pollers' backends.
        sep = "&" if "?" in env["DATABASE_URL"] else "?"
        env["DATABASE_URL"] += f"{sep}application_name=faults-{name}"
        if failpoints:
            env["SENDLATER_FAILPOINTS"] = failpoints
        command = [sys.executable]
        if skew_seconds:
            command += [str(Path(__file__).with_name("skewed.py")), str(skew_seconds)]
        command += ["manage.py", "runpoller", "--name", name, "--batch-size", str(BATCH_SIZE)]
        log = open(self.tmp / f"{name}.log", "a")  # noqa: SIM115 (closed with the process)
        self.pollers[name] = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )

    def partition_ddl_by_pollers(self) -> list[str]:
        """Log lines in which a poller created partitions (the harness made them all)."""
        found = []
        for name in self.pollers:
            log = self.tmp / f"{name}.log"
            if log.exists():
                found += [
                    line for line in log.read_text().splitlines() if "created partitions" in line
                ]
        return found

    def wait_ready(self, timeout: float = 30) -> None:
        """gunicorn answers, every poller has registered and the shards are owned."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            (registered, free) = sql(
                "SELECT (SELECT count(*) FROM polling_poller WHERE state = 'active'),"
                " (SELECT count(*) FROM polling_shardlease WHERE owner IS NULL)"
            )[0]
            owned = registered >= len(self.pollers) and self.lease_owners() and not free
            if owned and self._port_open():
                return
            time.sleep(0.1)
        raise AssertionError(f"cluster not ready after {timeout}s; logs in {self.tmp}")

    def _check_alive(self) -> None:
        if self.web is not None and self.web.poll() is not None:
            raise AssertionError(f"gunicorn exited: {(self.tmp / 'gunicorn.log').read_text()}")

    def _port_open(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.api_port), timeout=0.5):
                return True
        except OSError:
            return False

    def signal(self, name: str, signum: int) -> None:
        self.pollers[name].send_signal(signum)

    def stop_all(self) -> dict[str, int | None]:
        """SIGTERM every poller (SIGCONT first, in case it was stopped), then gunicorn."""
        codes: dict[str, int | None] = {}
        for proc in self.pollers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        if self.web is not None and self.web.poll() is None:
            self.web.terminate()  # meanwhile: it has nothing in flight
        for name, proc in self.pollers.items():
            try:
                codes[name] = proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait(timeout=10)
        if self.web is not None:
            try:
                self.web.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.web.kill()
                self.web.wait(timeout=10)
        return codes

    # --- API ------------------------------------------------------------------------

    def post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        return self.request("POST", path, body, headers)

    def request(
        self, method: str, path: str, body: Any, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.api_port, timeout=30)
        try:
            conn.request(
                method,
                path,
                body=json.dumps(body),
                headers={
                    "Authorization": f"Bearer {self.api_key}",
                    "Content-Type": "application/json",
                    **(headers or {}),
                },
            )
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"null")
        finally:
            conn.close()

    def submit_bulk(self, jobs: list[dict[str, Any]]) -> list[str]:
        ids: list[str] = []
        for start in range(0, len(jobs), 1000):
            status, body = self.post("/api/v1/jobs/bulk", {"jobs": jobs[start : start + 1000]})
            assert status == 201, (status, body)
            ids += [item["id"] for item in body["jobs"]]
        return ids

    # --- what the database says -----------------------------------------------------

    def lease_owners(self) -> set[str]:
        return {owner for (owner,) in sql("SELECT DISTINCT owner FROM polling_shardlease") if owner}

    def claimed_by(self, *names: str) -> int:
        """Jobs the named pollers (default: all) have in flight, by their batches."""
        owners = list(names) or list(self.pollers)
        (count,) = sql(
            "SELECT COALESCE(sum(job_count), 0) FROM scheduling_inflightbatch"
            " WHERE owner = ANY(%s)",
            [owners],
        )[0]
        return int(count)

    def batches(self, *names: str) -> dict[int, int]:
        """The in-flight batches of pollers ``names`` (default: all): id -> jobs."""
        owners = list(names) or list(self.pollers)
        query = "SELECT id, job_count FROM scheduling_inflightbatch WHERE owner = ANY(%s)"
        return dict(sql(query, [owners]))

    def open_work(self) -> int:
        query = "SELECT count(*) FROM scheduling_job WHERE status = 'pending'"
        (count,) = sql(query)[0]
        return int(count)

    def drain(self, timeout: float) -> float:
        """Wait until no job is pending or claimed; return the seconds it took."""
        t0 = time.monotonic()
        while self.open_work():
            if time.monotonic() - t0 > timeout:
                raise AssertionError(
                    f"not drained after {timeout}s: {self.open_work()} open; logs in {self.tmp}"
                )
            time.sleep(0.2)
        return time.monotonic() - t0

    # --- faults ---------------------------------------------------------------------

    def fault_begin(self, what: str, in_flight: int = 0) -> FaultWindow:
        window = FaultWindow(what, time.time(), in_flight=in_flight)
        self.faults.append(window)
        return window

    @staticmethod
    def fault_end(window: FaultWindow) -> None:
        window.end = time.time()


def partitions_precreate() -> None:
    """Create, before any poller starts, every partition the scenario's pollers would
    want (the day before to ``PARTITION_AHEAD_DAYS`` ahead), so none of them spends
    a scenario creating partitions or racing another poller for the DDL lock."""
    now = db_now()
    days = PARTITION_AHEAD_DAYS + 1  # a day more: a run may cross midnight (UTC)
    partitions_ensure(now=now, days=days)
    missing = partitions_missing(now=now, days=days)
    assert not missing, f"partitions still missing: {missing}"


def sql(query: str, params: Any = ()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []
