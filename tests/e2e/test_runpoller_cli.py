"""runpoller as an operator meets it: a clear error when the database is down, metrics served."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support.procs import ROOT, child_env, free_port


@pytest.mark.parametrize(
    "url",
    [
        f"postgres://postgres@127.0.0.1:{free_port()}/nowhere",
        "sqlite:////nonexistent-dir/sendlater.sqlite3",
    ],
    ids=["postgres-refused", "sqlite-unopenable"],
)
def test_unreachable_database_is_a_clear_start_error(url: str) -> None:
    env = child_env(DATABASE_URL=url, SENDLATER_DB_POOL="false")
    proc = subprocess.run(
        [sys.executable, "manage.py", "runpoller", "--once"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "database unreachable or not migrated" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.django_db(transaction=True)
def test_metrics_port_serves_poller_metrics(tmp_path) -> None:
    port = free_port()
    env = child_env(SENDLATER_DB_POOL="false", SENDLATER_POLL_INTERVAL_SECONDS="0.2")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runpoller", "--name", "m1", "--metrics-port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
                if "sendlater_lease_acquisitions_total 64.0" in text:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "metrics never showed the acquired leases"
            time.sleep(0.3)
        assert "sendlater_deliveries_total" in text
        assert "sendlater_claim_batch_size_bucket" in text
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


@pytest.mark.django_db(transaction=True)
def test_json_logs_name_the_poller() -> None:
    env = child_env(SENDLATER_DB_POOL="false", SENDLATER_LOG_FORMAT="json")
    proc = subprocess.run(
        [sys.executable, "manage.py", "runpoller", "--name", "j1", "--once"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert lines, proc.stderr
    acquired = [line for line in lines if "acquired shards" in line["message"]]
    assert acquired and acquired[0]["poller"] == "j1" and acquired[0]["level"] == "INFO"
    assert all(line.get("poller") == "j1" for line in lines if line["logger"].startswith("polling"))
