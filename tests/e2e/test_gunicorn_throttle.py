"""Throttle budgets hold across server processes: the counter lives in a shared store
(the database by default, Redis with SENDLATER_THROTTLE_STORE=cache and CACHE_URL)."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import time

import pytest
from django.core.cache import cache
from django.utils import timezone

from tests.support.api import client_for
from tests.support.factories import team_create
from tests.support.procs import ROOT, child_env, free_port

RATE = 5


REDIS_URL = "redis://127.0.0.1:6379/7"


def _redis_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1):
            return True
    except OSError:
        return False


def _start_gunicorn(port: int, **store: str) -> subprocess.Popen[str]:
    """One single-worker gunicorn: two of them are two processes with no memory in common."""
    env = child_env(
        SENDLATER_THROTTLE_JOBS=f"{RATE}/hour",
        ALLOWED_HOSTS="127.0.0.1",
        DEBUG="false",
        SENDLATER_DB_POOL="false",
        **store,
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


STORES = {
    "database": {},
    "redis": {"SENDLATER_THROTTLE_STORE": "cache", "CACHE_URL": REDIS_URL},
}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("store", sorted(STORES))
def test_budget_is_shared_by_all_workers(store: str) -> None:
    if store == "redis":
        if not _redis_up():
            pytest.skip("needs Redis on 127.0.0.1:6379 (Debian's redis-server)")
        import redis

        redis.Redis.from_url(REDIS_URL).flushdb()
    cache.clear()
    key = client_for(team_create(slug="acme")).api_key
    ports = [free_port(), free_port()]
    procs = [_start_gunicorn(port, **STORES[store]) for port in ports]
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


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_key_revoked_elsewhere_stops_working_within_the_cache_bound() -> None:
    """The server process caches the verified key; a revocation written by another
    process reaches it within SENDLATER_API_KEY_CACHE_SECONDS."""
    from scheduling.models import ApiKey

    ttl = 1.0
    key = client_for(team_create(slug="acme")).api_key
    port = free_port()
    proc = _start_gunicorn(port, SENDLATER_API_KEY_CACHE_SECONDS=str(ttl))
    try:
        _wait_for_port(proc, port)
        assert _get(port, key) == 200  # verified and cached by the server
        ApiKey.objects.update(revoked_at=timezone.now())
        revoked = time.monotonic()
        while _get(port, key) != 401:
            assert time.monotonic() - revoked < ttl + 5, "revocation not seen in time"
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
