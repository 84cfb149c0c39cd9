"""Throttle budgets hold across gunicorn workers: the counter lives in the shared cache."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import time

import pytest
from django.core.cache import cache

from tests.support.api import client_for
from tests.support.factories import team_create
from tests.support.procs import ROOT, child_env

PORT = 8231
RATE = 5


def _wait_for_port(proc: subprocess.Popen, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read() if proc.stderr else "gunicorn exited")
        try:
            with socket.create_connection(("127.0.0.1", PORT), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("gunicorn did not start")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_budget_is_shared_by_all_workers() -> None:
    cache.clear()
    key = client_for(team_create(slug="acme")).api_key
    env = child_env(
        SENDLATER_THROTTLE_JOBS=f"{RATE}/hour",
        ALLOWED_HOSTS="127.0.0.1",
        DEBUG="false",
        SENDLATER_DB_POOL="false",
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "sendlater_site.wsgi",
            "--bind",
            f"127.0.0.1:{PORT}",
            "--workers",
            "2",
            "--access-logfile",
            "-",
            "--access-logformat",
            "%(p)s %(s)s",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_port(proc)
        # Hold one worker: it has accepted this request and waits for the rest of
        # its headers, so every other request is served by the other worker.
        held = socket.create_connection(("127.0.0.1", PORT), timeout=30)
        held.sendall(
            f"GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {key}\r\n".encode()
        )
        statuses = [_get(key) for _ in range(2 * RATE)]
        # The held worker has counted nothing itself, yet it sees the budget spent.
        held.sendall(b"Connection: close\r\n\r\n")
        held_status = int(held.makefile("rb").readline().split()[1])
        held.close()
    finally:
        proc.terminate()
        out, _err = proc.communicate(timeout=30)
    assert statuses == [200] * RATE + [429] * RATE, statuses
    assert held_status == 429
    served = [line.split() for line in out.splitlines() if line.strip()]
    assert len({pid for pid, _ in served}) == 2, served


def _get(key: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    try:
        conn.request("GET", "/api/v1/jobs", headers={"Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()
