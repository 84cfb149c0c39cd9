"""CPU time of the processes a benchmark runs, read from /proc (Linux).

``CpuGroups`` samples named groups of processes (pollers, their transports, the
database's backends, the receiver) at two moments; the difference per group over
the jobs delivered in between is the CPU a delivered job costs each part.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (0 if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_SECOND


def children_of(pid: int) -> list[int]:
    """The direct children of ``pid``."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class CpuGroups:
    """CPU seconds per named group of processes between ``start()`` and ``stop()``.

    Each group is a function returning its pids at the moment of sampling; a process
    seen at only one of the two samples counts from 0 (started) or is lost (ended:
    sample before it ends).
    """

    def __init__(self, groups: dict[str, Callable[[], Iterable[int]]]) -> None:
        self.groups = groups
        self._start: dict[str, dict[int, float]] = {}
        self.seconds: dict[str, float] = {}

    def _sample(self) -> dict[str, dict[int, float]]:
        return {
            name: {pid: cpu_seconds(pid) for pid in pids()} for name, pids in self.groups.items()
        }

    def start(self) -> None:
        self._start = self._sample()

    def stop(self) -> dict[str, float]:
        end = self._sample()
        self.seconds = {
            name: sum(t - self._start.get(name, {}).get(pid, 0.0) for pid, t in pids.items())
            for name, pids in end.items()
        }
        return self.seconds


def postgres_pids() -> list[int]:
    """The database's backends serving the benchmark's database (the pollers')."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return [pid for (pid,) in cursor.fetchall()]


def service_groups(
    poller_pids: list[int], receiver: Callable[[], Iterable[int]]
) -> dict[str, Callable[[], Iterable[int]]]:
    """The groups a webhook benchmark reads: the ``runpoller`` processes, their
    transports (children), the database's backends and the receiver."""
    return {
        "pollers": lambda: poller_pids,
        "transports": lambda: [c for pid in poller_pids for c in children_of(pid)],
        "postgres": postgres_pids,
        "receiver": receiver,
    }
