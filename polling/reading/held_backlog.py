"""Due jobs held by flow control, and the due backlog the service could send now.

A key that is paused, or drawing its rate, or at its parallelism limit keeps its due
jobs pending on purpose (``polling.flow.admission``): they wait on the team's own limit,
not on the pollers. Lag, due backlog and oldest-due age (``polling.reading.lag``, the
lag dashboard, ``/metrics``) count only the rest, and the held jobs are reported
beside them, per shard and per key.

A key holds when (read from its ``FlowControl`` row and live ``FlowSlot`` rows):

- **paused**;
- **parallelism**: the live slots of all pollers together reach its limit;
- **rate**: its schedule of slots (``tat``) is current, i.e. not more than one slot
  gap plus ``RATE_CURRENT_GRACE_SECONDS`` behind now. A key whose ``tat`` lies
  further back is not being drawn (no poller reads it: a dead owner, a poller far
  behind): its due jobs count as lag like any others, so a stalled rate-limited key
  still shows up where an operator looks for stalls.

Cost, whatever the number of shards: one read of the keys that have limits, one
grouped read of live slots, and one grouped read of the held keys' due pending jobs
through the partial key index ``job_pending_flow_key`` (``(team, key, due_at)``,
pending rows with a key only; one index range per held key, bounded by ``due_at``).
It reads the held jobs' rows for their bucket and shard, so it costs in proportion
to the held due jobs, never to the table (docs/operations.md, "Lag and held jobs").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q, Sum

from polling.common.sql import dt, fetch_all, to_dt
from scheduling.flow.models import FlowControl, FlowSlot

FlowKey = tuple[int, str]  # (team id, flow_control_key)

# A rate-limited key whose next slot (tat) is further behind now than one slot gap and
# this is not being drawn: its jobs wait on the pollers, and count as lag.
RATE_CURRENT_GRACE_SECONDS = 5.0
KEYS_PER_READ = 2000  # held keys named in one grouped read (parameters: two per key)

HELD_DUE_SQL = """
WITH h(team_id, flow_key) AS (VALUES {values})
SELECT j.bucket, j.shard, j.team_id, j.flow_control_key, COUNT(*), MIN(j.due_at)
FROM scheduling_job j JOIN h ON j.team_id = h.team_id AND j.flow_control_key = h.flow_key
WHERE j.status = 'pending' AND j.flow_control_key IS NOT NULL AND j.due_at <= %s
  AND j.bucket <= %s
GROUP BY j.bucket, j.shard, j.team_id, j.flow_control_key
"""


@dataclass(frozen=True, slots=True)
class HeldKey:
    """A key holding due jobs back, with why; the lag figures leave these out."""

    team_id: int
    team: str  # the team's slug
    key: str
    reason: str  # paused | rate | parallelism
    jobs: int  # due pending jobs of the key (its jobs in flight included)
    oldest: datetime | None
    shards: int  # how many shards they lie on


@dataclass(frozen=True, slots=True)
class HeldGroup:
    """The held due jobs of one key in one ``(bucket, shard)``."""

    bucket: datetime
    shard: int
    team_id: int
    key: str
    jobs: int
    oldest: datetime


@dataclass(frozen=True, slots=True)
class ShardBacklog:
    """One shard's due pending jobs, split into those that could go now and the held."""

    depth: int = 0  # due pending jobs not held (in flight included)
    oldest: datetime | None = None  # the oldest of those (see ``backlog_split``)
    first_bucket: datetime | None = None  # the earliest bucket holding one of those
    held: int = 0
    held_oldest: datetime | None = None


@dataclass(frozen=True, slots=True)
class HeldBacklog:
    reasons: dict[FlowKey, str]
    groups: list[HeldGroup]
    keys: list[HeldKey]  # most held jobs first


def held_reasons(now: datetime) -> tuple[dict[FlowKey, str], dict[FlowKey, str]]:
    """The keys holding their jobs as of ``now``, with why; and the teams' slugs."""
    flows = list(
        FlowControl.objects.filter(
            Q(paused=True) | Q(rate__isnull=False, tat__isnull=False) | Q(parallelism__isnull=False)
        ).values_list(
            "id",
            "team_id",
            "team__slug",
            "key",
            "paused",
            "rate",
            "period_seconds",
            "parallelism",
            "tat",
        )
    )
    slots: dict[int, int] = {}
    if any(f[7] is not None and not f[4] for f in flows):
        # Joined, not a list of ids: thousands of keys are no thousands of parameters.
        live = FlowSlot.objects.filter(
            flow__parallelism__isnull=False, flow__paused=False, expires_at__gt=now, slots__gt=0
        )
        slots = {
            row["flow_id"]: int(row["n"] or 0)
            for row in live.values("flow_id").annotate(n=Sum("slots"))
        }
    reasons: dict[FlowKey, str] = {}
    slugs: dict[FlowKey, str] = {}
    for fid, team_id, slug, key, paused, rate, period, parallelism, tat in flows:
        reason = None
        if paused:
            reason = "paused"
        elif parallelism is not None and slots.get(fid, 0) >= parallelism:
            reason = "parallelism"
        elif rate and tat is not None:
            gap = period / rate
            if tat > now - timedelta(seconds=gap + RATE_CURRENT_GRACE_SECONDS):
                reason = "rate"
        if reason is not None:
            reasons[(team_id, key)] = reason
            slugs[(team_id, key)] = slug
    return reasons, slugs


def held_groups(
    keys: Sequence[FlowKey], *, now: datetime, open_bucket: datetime
) -> list[HeldGroup]:
    """The due pending jobs of ``keys`` in buckets up to ``open_bucket``, grouped by
    ``(bucket, shard, key)``: one read per ``KEYS_PER_READ`` keys."""
    found: list[HeldGroup] = []
    for start in range(0, len(keys), KEYS_PER_READ):
        chunk = keys[start : start + KEYS_PER_READ]
        sql = HELD_DUE_SQL.format(values=", ".join(["(%s, %s)"] * len(chunk)))
        params = [v for pair in chunk for v in pair] + [dt(now), dt(open_bucket)]
        for bucket, shard, team_id, key, n, oldest in fetch_all(sql, params):
            found.append(
                HeldGroup(to_dt(bucket), int(shard), int(team_id), str(key), int(n), to_dt(oldest))  # type: ignore[arg-type]
            )
    return found


def held_backlog(*, now: datetime, open_bucket: datetime) -> HeldBacklog:
    """The held keys with their due jobs, by ``(bucket, shard)`` and by key."""
    reasons, slugs = held_reasons(now)
    groups = held_groups(sorted(reasons), now=now, open_bucket=open_bucket) if reasons else []
    by_key: dict[FlowKey, list[HeldGroup]] = defaultdict(list)
    for group in groups:
        by_key[(group.team_id, group.key)].append(group)
    keys = [
        HeldKey(
            team_id=team_id,
            team=slugs[(team_id, key)],
            key=key,
            reason=reasons[(team_id, key)],
            jobs=sum(g.jobs for g in found),
            oldest=min(g.oldest for g in found),
            shards=len({g.shard for g in found}),
        )
        for (team_id, key), found in by_key.items()
    ]
    keys.sort(key=lambda k: (-k.jobs, k.team, k.key))
    return HeldBacklog(reasons, groups, keys)


def backlog_split(
    rows: Iterable[tuple[datetime, int, int, datetime]],
    held: Iterable[HeldGroup],
    *,
    fold: tuple[datetime, datetime] | None = None,
) -> dict[int, ShardBacklog]:
    """Per shard, the due backlog ``rows`` (``(bucket, shard, depth, oldest due_at)``,
    every due pending job) less the ``held`` jobs among them.

    ``fold``: ``(first, into)``: ``rows`` carry the buckets before ``first`` folded
    into ``into`` (the dashboard's backlog history); ``held`` is folded alike.

    Where a group's oldest job is a held one, the oldest of its other jobs is not
    known: it is taken as the group's bucket start, or the group's oldest when later
    (so the age is exact to within the bucket width, and never more than the true one
    by more than that).
    """
    held_at: dict[tuple[datetime, int], list[HeldGroup]] = defaultdict(list)
    for group in held:
        bucket = group.bucket
        if fold is not None and bucket < fold[0]:
            bucket = fold[1]
        held_at[(bucket, group.shard)].append(group)
    shards: dict[int, dict] = {}
    for bucket, shard, depth, oldest in rows:
        out = shards.setdefault(
            shard, {"depth": 0, "oldest": None, "first": None, "held": 0, "held_oldest": None}
        )
        mine = held_at.get((bucket, shard), ())
        held_jobs = sum(g.jobs for g in mine)
        free = max(0, depth - held_jobs)
        if held_jobs:
            held_oldest = min(g.oldest for g in mine)
            out["held"] += held_jobs
            out["held_oldest"] = _earliest(out["held_oldest"], held_oldest)
            if free and held_oldest <= oldest:
                oldest = max(oldest, bucket)
        if free:
            out["depth"] += free
            out["oldest"] = _earliest(out["oldest"], oldest)
            out["first"] = _earliest(out["first"], bucket)
    return {
        shard: ShardBacklog(v["depth"], v["oldest"], v["first"], v["held"], v["held_oldest"])
        for shard, v in shards.items()
    }


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
