"""Reads of flow control: a key's limits with its live state (waiting, in flight, used)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Sum

from scheduling.flow.models import FlowControl, FlowSlot
from scheduling.models import Job, JobStatus
from scheduling.sharding.clock import db_now


@dataclass(frozen=True, slots=True)
class FlowState:
    """A key's limits and what it is doing now."""

    flow: FlowControl
    waiting: int  # due pending jobs not in flight: held back by the key
    in_flight: int  # deliveries in flight across all pollers
    delivered_in_period: int  # deliveries started in the current period

    @property
    def rate_in_use(self) -> float | None:
        """The share of the rate used in the current period (None: no rate limit)."""
        if not self.flow.rate:
            return None
        return self.delivered_in_period / self.flow.rate


def _in_flight(
    flows: list[FlowControl], now: datetime, *, every_key: bool = False
) -> dict[int, int]:
    slots = FlowSlot.objects.filter(expires_at__gt=now, slots__gt=0)
    if not every_key:
        slots = slots.filter(flow__in=[f.pk for f in flows])
    rows = slots.values("flow_id").annotate(total=Sum("slots"))
    return {row["flow_id"]: int(row["total"]) for row in rows}


def _due_pending(
    flows: list[FlowControl], now: datetime, *, every_key: bool = False
) -> dict[tuple[int, str], int]:
    """Due pending jobs per (team, key): one grouped read of the partial key index.

    ``every_key``: all keys of all teams (the console, ``/metrics``), without lists of
    thousands of teams and keys as query parameters.
    """
    if not flows:
        return {}
    jobs = Job.objects.filter(
        status=JobStatus.PENDING, flow_control_key__isnull=False, due_at__lte=now
    )
    if not every_key:
        jobs = jobs.filter(
            team_id__in={f.team_id for f in flows}, flow_control_key__in={f.key for f in flows}
        )
    rows = jobs.values("team_id", "flow_control_key").annotate(n=Count("id"))
    return {(row["team_id"], row["flow_control_key"]): int(row["n"]) for row in rows}


def _period_count(flow: FlowControl, now: datetime) -> int:
    if flow.window_start is None:
        return 0
    if now >= flow.window_start + timedelta(seconds=flow.period_seconds):
        return 0
    return flow.window_count


def flow_states(
    flows: Iterable[FlowControl], *, now: datetime | None = None, every_key: bool = False
) -> list[FlowState]:
    """The live state of ``flows``, in their order. Three reads, whatever their number.

    ``every_key``: ``flows`` are all the keys there are, so the reads need not name them.
    """
    flows = list(flows)
    now = now or db_now()
    in_flight = _in_flight(flows, now, every_key=every_key)
    due = _due_pending(flows, now, every_key=every_key)
    states = []
    for flow in flows:
        busy = in_flight.get(flow.pk, 0)
        waiting = max(0, due.get((flow.team_id, flow.key), 0) - busy)
        states.append(FlowState(flow, waiting, busy, _period_count(flow, now)))
    return states


def flow_get(*, team_id: int, key: str) -> FlowControl | None:
    return FlowControl.objects.filter(team_id=team_id, key=key).first()


def flow_list(
    *, team_id: int | None = None, after: str | None = None, limit: int | None = None
) -> list[FlowControl]:
    """A team's keys by name (every team's with None: the console); ``after`` (a key)
    and ``limit`` page through them (the API's list)."""
    flows = FlowControl.objects.select_related("team").order_by("team_id", "key")
    if team_id is not None:
        flows = flows.filter(team_id=team_id)
    if after is not None:
        flows = flows.filter(key__gt=after)
    if limit is not None:
        flows = flows[:limit]
    return list(flows)


def flow_states_by_waiting(*, limit: int | None = None) -> list[FlowState]:
    """Every team's keys, most waiting first (the console, ``/metrics``)."""
    states = flow_states(flow_list(), every_key=True)
    states.sort(key=lambda s: (-s.waiting, -s.in_flight, s.flow.team_id, s.flow.key))
    return states if limit is None else states[:limit]
