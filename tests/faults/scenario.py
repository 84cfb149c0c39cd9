"""One scenario's timeline: schedule, race writes, inject the fault, drain, check."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.faults.cluster import Cluster
from tests.faults.conftest import report_and_assert
from tests.faults.invariants import Report, check
from tests.faults.workload import RacingWriter, schedule

DRAIN_TIMEOUT_SECONDS = 60


def run(
    cluster: Cluster,
    name: str,
    *,
    seed: int,
    fault: Callable[[Cluster], None],
    n: int = 300,
    span: float = 10.0,
    fault_at: float = 4.0,
    duration: float = 12.0,
    extra_recovery: float = 0.0,
    dead_fraction: float = 0.0,
    racing: bool = True,
    writer: dict[str, Any] | None = None,
    extra_bound: int = 0,
    hot: tuple[float, float, float] | None = None,
    flow_keys: tuple[str, ...] = (),
) -> Report:
    """``n`` jobs due over ``span`` s from 2 s ahead; ``fault`` runs ``fault_at`` s in
    (it may block while the fault lasts); racing writes stop after ``duration`` s."""
    t0 = time.monotonic()
    schedule(
        cluster,
        seed=seed,
        n=n,
        start_in=2.0,
        span=span,
        dead_fraction=dead_fraction,
        hot=hot,
        flow_keys=flow_keys,
    )
    racer = RacingWriter(cluster, seed=seed, **(writer or {}))
    if racing:
        racer.__enter__()
    try:
        time.sleep(max(0.0, fault_at - (time.monotonic() - t0)))
        fault(cluster)
        time.sleep(max(0.0, duration - (time.monotonic() - t0)))
    finally:
        if racing:
            racer.__exit__()
    cluster.drain(DRAIN_TIMEOUT_SECONDS)
    ddl = cluster.partition_ddl_by_pollers()
    assert not ddl, f"pollers created partitions during the scenario: {ddl[:3]}"
    report = check(
        cluster,
        f"{name} (seed {seed})",
        extra_recovery=extra_recovery,
        extra_bound=extra_bound,
    )
    report_and_assert(report)
    return report


def wait_in_flight(cluster: Cluster, *names: str, timeout: float = 5.0) -> None:
    """Block until one of pollers ``names`` holds claimed rows (it is mid-batch)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cluster.claimed_by(*names):
        time.sleep(0.005)
