"""Which poller should own which shard: rendezvous hashing, with operator pins.

Pure functions: every poller computes the same answer from the same live set,
and adding or removing one poller moves only about 1/N of the shards. Their inputs
(live pollers and pins) come from one read, ``assignment_inputs``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

import mmh3
from django.db import connection

from polling.common.sql import dt
from polling.models import PollerState


def score(poller: str, shard: int) -> int:
    """The rendezvous weight of ``poller`` for ``shard`` (highest wins)."""
    return mmh3.hash(f"{poller}\x00{shard}", signed=False)


def owner_of(shard: int, live: Iterable[str]) -> str | None:
    """The live poller that scores highest for ``shard`` (ties broken by name)."""
    return max(live, key=lambda name: (score(name, shard), name), default=None)


def assignment(
    *, shard_count: int, live: Iterable[str], pins: Mapping[int, str] | None = None
) -> dict[int, str]:
    """``{shard: poller}`` for shards ``0 .. shard_count - 1``.

    A pin to a live poller overrides the hash; a pin to a poller that is not live
    is ignored (the shard must not go unserved).
    """
    names = sorted(set(live))
    alive = set(names)
    pins = pins or {}
    result: dict[int, str] = {}
    for shard in range(shard_count):
        pinned = pins.get(shard)
        chosen = pinned if pinned in alive else owner_of(shard, names)
        if chosen is not None:
            result[shard] = chosen
    return result


def shards_for(
    me: str, *, shard_count: int, live: Iterable[str], pins: Mapping[int, str] | None = None
) -> set[int]:
    """The shards ``me`` should own."""
    plan = assignment(shard_count=shard_count, live=set(live) | {me}, pins=pins)
    return {shard for shard, owner in plan.items() if owner == me}


ASSIGNMENT_INPUTS_SQL = """
SELECT 'live', name, NULL FROM polling_poller WHERE state = %s AND heartbeat_at > %s
UNION ALL
SELECT 'pin', pinned_to, shard FROM polling_shardlease WHERE pinned_to IS NOT NULL
"""


def assignment_inputs(*, now: datetime, lease_seconds: int) -> tuple[set[str], dict[int, str]]:
    """Live pollers (active, heartbeat within the lease) and operator pins, in one query."""
    since = now - timedelta(seconds=lease_seconds)
    with connection.cursor() as cursor:
        cursor.execute(ASSIGNMENT_INPUTS_SQL, [PollerState.ACTIVE.value, dt(since)])
        rows = cursor.fetchall()
    live = {name for kind, name, _ in rows if kind == "live"}
    pins = {int(shard): name for kind, name, shard in rows if kind == "pin"}
    return live, pins
