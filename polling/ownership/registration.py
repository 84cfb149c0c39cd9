"""Writes about pollers: registration, heartbeat, shard rows, and operator moves.

Operator moves (the console calls these) never update lease rows directly: pins
go through ``leases.lease_pin`` and releases through the fenced
``leases.lease_release_fenced``; a drained poller releases its own leases.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction

from polling.models import Poller, PollerState, ShardCheckpoint, ShardLease
from polling.ownership import leases

logger = logging.getLogger(__name__)


class PollerNameInUse(Exception):
    """Another live process already runs a poller of this name."""


class PollerNotFound(Exception):
    """No poller of this name is registered."""


def poller_register(
    *, name: str, host: str, pid: int, version: str, now: datetime, lease_seconds: int
) -> Poller:
    """Register (or re-register) poller ``name``; refuse if another live process has it.

    A poller an operator drained stays draining across restarts.
    """
    with transaction.atomic():
        poller = Poller.objects.select_for_update().filter(name=name).first()
        if poller is None:
            return Poller.objects.create(
                name=name,
                host=host,
                pid=pid,
                version=version,
                started_at=now,
                heartbeat_at=now,
                state=PollerState.ACTIVE,
            )
        alive = (now - poller.heartbeat_at).total_seconds() < lease_seconds
        if (
            alive
            and poller.state != PollerState.STOPPED
            and (poller.host, poller.pid)
            != (
                host,
                pid,
            )
        ):
            raise PollerNameInUse(
                f"poller {name!r} is alive on {poller.host} (pid {poller.pid}); "
                "choose another --name"
            )
        if poller.state != PollerState.DRAINING:
            poller.state = PollerState.ACTIVE
        poller.host, poller.pid, poller.version = host, pid, version
        poller.started_at = poller.heartbeat_at = now
        poller.save()
        return poller


def poller_heartbeat(*, name: str, now: datetime) -> str | None:
    """Record that ``name`` is alive; return its state (None if the row is gone)."""
    updated = Poller.objects.filter(name=name).update(heartbeat_at=now)
    if not updated:
        return None
    return Poller.objects.filter(name=name).values_list("state", flat=True).first()


def poller_stop(*, name: str, now: datetime) -> None:
    """Mark ``name`` stopped (it released its leases first)."""
    Poller.objects.filter(name=name).exclude(state=PollerState.DRAINING).update(
        state=PollerState.STOPPED, heartbeat_at=now
    )


def poller_drain(*, name: str) -> None:
    """Ask poller ``name`` to release its shards and stay idle (operator action)."""
    if not Poller.objects.filter(name=name).update(state=PollerState.DRAINING):
        raise PollerNotFound(f"no poller named {name!r}")
    logger.info("poller %s: drain requested", name)


def poller_resume(*, name: str) -> None:
    """Undo a drain: poller ``name`` takes its share of shards again."""
    if not Poller.objects.filter(name=name).update(state=PollerState.ACTIVE):
        raise PollerNotFound(f"no poller named {name!r}")


def shard_pin(*, shard: int, poller: str) -> bool:
    """Pin ``shard`` to ``poller``: it moves there after the owner's in-flight batch."""
    logger.info("shard %s: pinned to poller %s", shard, poller)
    return leases.lease_pin(shard=shard, poller=poller)


def shard_unpin(*, shard: int) -> bool:
    """Return ``shard`` to the hash assignment."""
    logger.info("shard %s: unpinned", shard)
    return leases.lease_pin(shard=shard, poller=None)


def lease_release(*, shard: int, owner: str, epoch: int) -> bool:
    """Free ``shard``'s lease if ``owner`` still holds it at ``epoch`` (operator action)."""
    released = leases.lease_release_fenced(shard=shard, owner=owner, epoch=epoch)
    logger.info("shard %s: release of %s@%s -> %s", shard, owner, epoch, released)
    return released


def shard_rows_ensure(*, shard_count: int) -> None:
    """Create lease and checkpoint rows for shards ``0 .. shard_count - 1`` (idempotent)."""
    indices = range(shard_count)
    ShardLease.objects.bulk_create([ShardLease(shard=i) for i in indices], ignore_conflicts=True)
    ShardCheckpoint.objects.bulk_create(
        [ShardCheckpoint(shard=i) for i in indices], ignore_conflicts=True
    )
