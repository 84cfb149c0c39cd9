"""Run Django code in other processes against the test database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]

# The marks of a module whose tests run pollers as processes: ``pytestmark = POLLER_PROCESSES``.
POLLER_PROCESSES = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="multi-process pollers need PostgreSQL (SKIP LOCKED, concurrent writers)",
    ),
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_database_url() -> str:
    """DATABASE_URL naming the database the running test uses."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    user = s.get("USER") or "postgres"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    # A multi-host URL (docs/ha.md) comes back as HOST "h1,h2" and PORT "p1,p2".
    hosts = str(s.get("HOST") or "127.0.0.1").split(",")
    ports = str(s.get("PORT") or 5432).split(",")
    netloc = ",".join(f"{h}:{p}" for h, p in zip(hosts, ports * len(hosts), strict=False))
    query = ""
    if s.get("OPTIONS", {}).get("target_session_attrs"):
        query = f"?target_session_attrs={s['OPTIONS']['target_session_attrs']}"
    return f"postgres://{user}{password}@{netloc}/{s['NAME']}{query}"


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": test_database_url(),
            "DJANGO_SETTINGS_MODULE": "sendlater_site.settings",
            "PYTHONPATH": str(ROOT),
            "SECRET_KEY": env.get("SECRET_KEY") or "test-only",
        }
    )
    env.update(extra)
    return env


def run_django_script(code: str, **env: str) -> subprocess.Popen[str]:
    """Start ``python -c`` with Django set up on the test database."""
    prelude = "import django; django.setup()\n"
    return subprocess.Popen(
        [sys.executable, "-c", prelude + code],
        cwd=ROOT,
        env=child_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
