"""The background lease renewer renews only while a dispatch makes progress."""

from __future__ import annotations

from datetime import timedelta

import pytest

from polling.models import ShardLease
from polling.ownership import leases, registration
from polling.ownership.renewer import DispatchProgress, LeaseRenewer
from scheduling.sharding.clock import db_now

pytestmark = pytest.mark.django_db


def _held_until() -> dict[int, object]:
    return dict(ShardLease.objects.filter(owner="p1").values_list("shard", "expires_at"))


def test_renews_while_deliveries_finish_and_stops_when_stuck() -> None:
    registration.shard_rows_ensure(shard_count=4)
    now = db_now()
    leases.lease_acquire(owner="p1", shards=[0, 1], now=now, until=now + timedelta(seconds=3))
    before = _held_until()
    progress = DispatchProgress()
    renewer = LeaseRenewer(owner="p1", lease_seconds=60, stall_seconds=5, progress=progress)

    assert renewer.renew_if_progressing() is None  # between batches: the loop's job
    with progress.dispatching_batch():
        assert set(renewer.renew_if_progressing() or {}) == {0, 1}
        after = _held_until()
        assert all(after[s] > before[s] + timedelta(seconds=50) for s in before)

        progress._at -= 6  # no delivery finished for longer than the stall limit: stuck
        assert renewer.renew_if_progressing() is None
        progress.touch()
        assert renewer.renew_if_progressing() is not None
    assert renewer.renew_if_progressing() is None


def test_an_expired_lease_is_not_revived() -> None:
    registration.shard_rows_ensure(shard_count=2)
    now = db_now()
    leases.lease_acquire(owner="p1", shards=[0], now=now, until=now - timedelta(seconds=1))
    progress = DispatchProgress()
    renewer = LeaseRenewer(owner="p1", lease_seconds=3, stall_seconds=5, progress=progress)
    with progress.dispatching_batch():
        assert renewer.renew_if_progressing() == {}
