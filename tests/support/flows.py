"""Flow-control keys for console and metrics tests: limits, waiting jobs, live counters."""

from __future__ import annotations

from datetime import datetime, timedelta

from scheduling.flow.models import FlowControl, FlowSlot
from scheduling.flow.services import flow_limits_set
from scheduling.models import Team
from tests.support.console import job_make


def flow_make(
    team: Team,
    key: str,
    *,
    now: datetime,
    rate: int | None = None,
    period_seconds: int = 1,
    parallelism: int | None = 10,
    paused: bool = False,
    waiting: int = 0,
    in_flight: int = 0,
    delivered: int = 0,
) -> FlowControl:
    """A key with ``waiting`` due jobs held back, ``in_flight`` more out with a poller,
    and ``delivered`` deliveries started in its current period."""
    flow, _ = flow_limits_set(
        team=team, key=key, rate=rate, period_seconds=period_seconds, parallelism=parallelism
    )
    for i in range(waiting + in_flight):
        job_make(team, shard=i % 4, due_at=now - timedelta(seconds=30 + i), flow_control_key=key)
    # The test stands in for the pollers here: the console never writes these counters.
    if in_flight:
        FlowSlot.objects.create(
            flow=flow, poller="p1", slots=in_flight, expires_at=now + timedelta(seconds=15)
        )
    FlowControl.objects.filter(pk=flow.pk).update(
        paused=paused, window_start=now - timedelta(milliseconds=100), window_count=delivered
    )
    flow.refresh_from_db()
    return flow


def flows_bulk(team: Team, count: int, *, now: datetime, prefix: str = "k") -> None:
    """``count`` keys without jobs, in one statement."""
    FlowControl.objects.bulk_create(
        FlowControl(team=team, key=f"{prefix}{i:05d}", rate=10, created_at=now, updated_at=now)
        for i in range(count)
    )
