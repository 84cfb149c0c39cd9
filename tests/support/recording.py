"""Handlers for multi-process poller tests (loaded via SENDLATER_HANDLER_MODULES).

``record`` appends ``job_id attempt unix_time pid`` to a file per process under
SENDLATER_TEST_RECORD_DIR; ``slow_record`` first sleeps SENDLATER_TEST_SLOW_SECONDS;
``span_record`` sleeps as long and records when it started and ended (``spans``).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from scheduling.handlers import Delivery, register

_lock = threading.Lock()


def _write(delivery: Delivery) -> None:
    folder = Path(os.environ["SENDLATER_TEST_RECORD_DIR"])
    line = f"{delivery.job_id} {delivery.attempt} {time.time():.6f} {os.getpid()}\n"
    with _lock, open(folder / f"{os.getpid()}.log", "a") as out:
        out.write(line)


@register("record")
def record(delivery: Delivery) -> None:
    _write(delivery)


@register("slow_record")
def slow_record(delivery: Delivery) -> None:
    time.sleep(float(os.environ.get("SENDLATER_TEST_SLOW_SECONDS", "1")))
    _write(delivery)


@register("span_record")
def span_record(delivery: Delivery) -> None:
    started = time.time()
    time.sleep(float(os.environ.get("SENDLATER_TEST_SLOW_SECONDS", "1")))
    line = f"{delivery.job_id} {started:.6f} {time.time():.6f} {os.getpid()}\n"
    folder = Path(os.environ["SENDLATER_TEST_RECORD_DIR"])
    with _lock, open(folder / f"{os.getpid()}.spans", "a") as out:
        out.write(line)


def spans(folder: Path) -> list[tuple[str, float, float, int]]:
    """All recorded ``span_record`` runs: ``(job_id, started, ended, pid)``."""
    rows = []
    for path in folder.glob("*.spans"):
        for line in path.read_text().splitlines():
            job_id, started, ended, pid = line.split()
            rows.append((job_id, float(started), float(ended), int(pid)))
    return rows


def deliveries(folder: Path) -> list[tuple[str, int, float, int]]:
    """All recorded deliveries: ``(job_id, attempt, unix_time, pid)``."""
    rows = []
    for path in folder.glob("*.log"):
        for line in path.read_text().splitlines():
            job_id, attempt, at, pid = line.split()
            rows.append((job_id, int(attempt), float(at), int(pid)))
    return rows
