"""Throttle budgets hold across server processes: the counter lives in the shared cache."""

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
from tests.support.procs import ROOT, child_env, free_port

RATE = 5


def _start_gunicorn(port: int) -> subprocess.Popen[str]:
    """One single-worker gunicorn: two of them are two processes with no memory in common."""
    env = child_env(
        SENDLATER_THROTTLE_JOBS=f"{RATE}/hour",
        ALLOWED_HOSTS="127.0.0.1",
        DEBUG="false",
        SENDLATER_DB_POOL="false",
    )
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "sendlater_site.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
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


def _wait_for_port(proc: subprocess.Popen[str], port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read() if proc.stderr else "gunicorn exited")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("gunicorn did not start")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_budget_is_shared_by_all_workers() -> None:
    cache.clear()
    key = client_for(team_create(slug="acme")).api_key
    ports = [free_port(), free_port()]
    procs = [_start_gunicorn(port) for port in ports]
    try:
        for proc, port in zip(procs, ports, strict=True):
            _wait_for_port(proc, port)
        # Alternate between the two servers: each sees half the requests, and the
        # budget runs out after RATE requests in all, not RATE per process.
        statuses = [_get(ports[i % 2], key) for i in range(2 * RATE)]
    finally:
        outs = []
        for proc in procs:
            proc.terminate()
            outs.append(proc.communicate(timeout=30)[0])
    assert statuses == [200] * RATE + [429] * RATE, statuses
    served = [[line.split() for line in out.splitlines() if line.strip()] for out in outs]
    assert [len(lines) for lines in served] == [RATE, RATE], served
    assert len({lines[0][0] for lines in served}) == 2, served  # two processes answered


def _get(port: int, key: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/api/v1/jobs", headers={"Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()
