"""A production start without SENDLATER_ENCRYPTION_KEYS refuses to run, as without
SECRET_KEY; DEBUG (or the test suite) gets a development-only key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = (
    "import django; django.setup(); from django.conf import settings; "
    "print(len(settings.SENDLATER_ENCRYPTION_KEYS))"
)


def _start(**extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTEST_VERSION", "SENDLATER_ENCRYPTION_KEYS", "DEBUG")
    }
    env.update(SECRET_KEY="test-only", DJANGO_SETTINGS_MODULE="sendlater_site.settings", **extra)
    return subprocess.run(
        [sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_production_refuses_to_start_without_a_key() -> None:
    done = _start(DEBUG="false")
    assert done.returncode != 0
    assert "SENDLATER_ENCRYPTION_KEYS is not set" in done.stderr


def test_a_key_given_or_debug_starts() -> None:
    assert _start(DEBUG="false", SENDLATER_ENCRYPTION_KEYS="a" * 43 + "=").returncode == 0
    assert _start(DEBUG="true").stdout.strip() == "1"
