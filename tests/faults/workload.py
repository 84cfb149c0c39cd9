"""Seeded job schedules, submitted through the API (gunicorn), and a racing writer."""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduling.sharding.clock import db_now
from tests.faults.cluster import Cluster


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def schedule(
    cluster: Cluster,
    *,
    seed: int,
    n: int,
    start_in: float,
    span: float,
    dead_fraction: float = 0.0,
    hot: tuple[float, float, float] | None = None,
    flow_keys: tuple[str, ...] = (),
) -> list[str]:
    """``n`` jobs due at seeded random times in ``[now + start_in, + span]`` (so across
    buckets, and across shards by their ids); ``hot=(at, share, width)`` puts that
    share of them into ``width`` popular seconds from ``at`` on; with ``flow_keys``,
    every other job carries one of those flow-control keys in turn. Returns the ids."""
    rng = random.Random(seed)
    now = db_now()
    jobs: list[dict[str, Any]] = []
    for i in range(n):
        offset = start_in + rng.uniform(0, span)
        if hot and rng.random() < hot[1]:
            offset = hot[0] + rng.uniform(0, hot[2])
        path = "/hook/always500" if rng.random() < dead_fraction else "/hook"
        due = _iso(now + timedelta(seconds=offset))
        job = {
            "due_at": due,
            "callback_url": cluster.receiver.url(path),
            "payload": {"seed": seed, "i": i, "due": due},  # a retry moves due_at on
        }
        if flow_keys and i % 2 == 0:
            job["flow_control_key"] = flow_keys[(i // 2) % len(flow_keys)]
        jobs.append(job)
    return cluster.submit_bulk(jobs)


class RacingWriter:
    """Posts one job every ``every`` seconds through the API while a scenario runs,
    due between ``lo`` and ``hi`` seconds from now (negative: already late)."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        seed: int,
        every: float = 0.2,
        lo: float = -1,
        hi: float = 2,
        around: datetime | None = None,
    ) -> None:
        """``around``: due times are taken around that instant instead of now."""
        self.cluster, self.every, self.lo, self.hi, self.around = cluster, every, lo, hi, around
        self.rng = random.Random(seed + 1)
        self.ids: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RacingWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            base = self.around or datetime.now(UTC)
            due = base + timedelta(seconds=self.rng.uniform(self.lo, self.hi))
            body = {
                "due_at": _iso(due),
                "callback_url": self.cluster.receiver.url("/hook"),
                "payload": {"due": _iso(due)},
            }
            try:
                status, answer = self.cluster.post("/api/v1/jobs", body)
            except OSError as error:
                self.errors.append(repr(error))
                time.sleep(0.2)
                continue
            if status == 201:
                self.ids.append(answer["id"])
            else:
                self.errors.append(f"{status}: {answer}")
