"""The poller's parts built and run alone: the lease keeper, the shard reader, the pump."""

from __future__ import annotations

import threading
from collections.abc import Collection
from datetime import datetime, timedelta

import pytest
from django.conf import settings

from polling.engine.pipeline import Pipeline
from polling.engine.pump import Pump
from polling.models import ShardLease
from polling.ownership import registration
from polling.ownership.keeper import LeaseKeeper
from polling.reading.held_keys import HeldKeyReader
from polling.reading.shard_reads import ShardReader
from scheduling.jobs.services import job_schedule
from scheduling.models import InFlightBatch
from scheduling.sharding.clock import db_now
from tests.support.pollers import RecordingSink, future_base

pytestmark = pytest.mark.django_db

LEASE_SECONDS = 30
HOOK = "https://example.com/hook"


def keeper_build(name: str, now: datetime) -> LeaseKeeper:
    def register() -> None:
        registration.poller_register(
            name=name, host="test", pid=1, version="", now=now, lease_seconds=LEASE_SECONDS
        )

    register()
    return LeaseKeeper(name=name, lease_seconds=LEASE_SECONDS, register=register)


def no_busy() -> set[int]:
    return set()


def test_two_keepers_split_the_shards_and_a_drained_one_lets_go_after_its_flight() -> None:
    now = db_now()
    a, b = keeper_build("a", now), keeper_build("b", now)
    for _ in range(2):  # the first pass learns the shard count and sees the other poller
        a.maintain(now, busy=no_busy, stopping=False)
        b.maintain(now, busy=no_busy, stopping=False)
    shards = set(range(settings.SENDLATER_DEFAULT_SHARDS))
    assert set(a.leases) | set(b.leases) == shards and not set(a.leases) & set(b.leases)
    assert a.readable() == a.leases

    registration.poller_drain(name="a")
    later = now + timedelta(seconds=LEASE_SECONDS / 2)  # renewal due: the heartbeat sees "draining"
    flying = min(a.leases)
    a.maintain(later, busy=lambda: {flying}, stopping=False)
    assert a.state == "draining" and set(a.leases) == {flying} and a.releasing == {flying}
    assert a.readable() == {}  # nothing more is read from a shard being given up
    a.maintain(later, busy=no_busy, stopping=False)
    assert a.leases == {} and a.releasing == set()

    epochs = dict(b.leases)
    b.maintain(later, busy=no_busy, stopping=False)
    assert set(b.leases) == shards
    assert all(b.leases[s] == epochs[s] for s in epochs)  # kept: same epoch
    assert b.leases[flying] > 1  # taken over: a new epoch
    b.release_all()
    assert b.leases == {} and not b.stranded
    assert not ShardLease.objects.filter(owner="b").exists()


def test_a_keeper_forgets_lost_leases() -> None:
    keeper = LeaseKeeper(name="x", lease_seconds=LEASE_SECONDS, register=lambda: None)
    keeper.leases = {1: 3, 2: 3, 5: 4}
    keeper.releasing = {5}
    assert keeper.readable() == {1: 3, 2: 3}
    keeper.lose({2, 9})
    assert keeper.leases == {1: 3, 5: 4}


def reader_build(name: str, now: datetime) -> tuple[LeaseKeeper, Pipeline, ShardReader]:
    keeper = keeper_build(name, now)
    keeper.maintain(now, busy=no_busy, stopping=False)
    keeper.maintain(now, busy=no_busy, stopping=False)
    pipeline = Pipeline(
        owner=name,
        sink=RecordingSink(),
        window=100,
        group_size=10,
        group_seconds=0.0,
        stall_seconds=30,
    )
    reader = ShardReader(name=name, keeper=keeper, window=pipeline, now=lambda: now, width=60)
    return keeper, pipeline, reader


def test_a_shard_reader_plans_oldest_bucket_first_and_reads_into_the_window(team) -> None:
    base = future_base()
    jobs = [
        job_schedule(
            team=team,
            due_at=base + timedelta(seconds=s),
            target_kind="webhook",
            target=HOOK,
            now=base,
        )[0]
        for s in (70, 5, 10)
    ]
    now = base + timedelta(seconds=90)
    _keeper, pipeline, reader = reader_build("r", now)
    plan = reader.plan(now)
    assert [bucket for bucket, _ in plan] == sorted(bucket for bucket, _ in plan)
    # One entry a shard: its oldest bucket with a due job (two of the jobs may share a shard).
    oldest: dict[int, datetime] = {}
    for job in jobs:
        oldest[job.shard] = min(job.bucket, oldest.get(job.shard, job.bucket))
    assert {(bucket, shard) for shard, bucket in oldest.items()} == set(plan)
    planned = sum(1 for j in jobs if (j.bucket, j.shard) in set(plan))
    read = sum(reader.read(bucket, shard, 10) for bucket, shard in plan)
    assert read == planned and pipeline.in_flight == planned
    assert InFlightBatch.objects.count() == len(plan)
    # Read again: the cursor passes over what is in flight.
    assert sum(reader.read(bucket, shard, 10) for bucket, shard in plan) == 0


def test_a_shard_reader_lets_a_lost_lease_go(team) -> None:
    base = future_base()
    job, _ = job_schedule(team=team, due_at=base, target_kind="webhook", target=HOOK, now=base)
    now = base + timedelta(seconds=1)
    keeper, pipeline, reader = reader_build("r", now)
    ShardLease.objects.filter(shard=job.shard).update(epoch=99)  # someone else's epoch now
    assert reader.read(job.bucket, job.shard, 10) == 0
    assert job.shard not in keeper.leases and pipeline.in_flight == 0


def test_a_held_key_reader_with_nothing_held_reads_nothing(team) -> None:
    now = future_base()
    keeper, pipeline, reader = reader_build("r", now)
    held = HeldKeyReader(
        name="r",
        keeper=keeper,
        window=pipeline,
        shards=reader,
        now=lambda: now,
        stopping=threading.Event(),
        room_for_a_batch=lambda: True,
        batch_size=10,
    )
    assert held.read_due() == 0


class WindowStub:
    """A pipeline that answers what the pump asks; its write-back finds shard 2 lost."""

    window = 4

    def __init__(self) -> None:
        self.in_flight = 4
        self.written = 0
        self.held: list[set[int]] = []  # the shards each write-back was told the poller reads

    def room(self) -> int:
        return self.window - self.in_flight

    def send_due(self, now: datetime) -> None:
        """Nothing of this window waits for a rate slot."""

    def release_held(self) -> int:
        """No host's breaker holds anything of this window."""
        return 0

    def send_parked(self, now: datetime) -> None:
        """Nothing of this window waits for its host."""

    class hosts:
        @staticmethod
        def refresh_due() -> bool:
            return False

    def seconds_to_write(self) -> float | None:
        return 0.0

    def seconds_to_send(self, now: datetime) -> float | None:
        return None

    def collect(self, timeout: float = 0.0) -> int:
        return 0

    def write_due(self) -> bool:
        return True

    @property
    def all_answered(self) -> bool:
        return True

    def write_back(self, now: datetime, *, held: Collection[int] = ()) -> set[int]:
        self.written += 1
        self.held.append(set(held))
        self.in_flight = max(0, self.in_flight - 2)
        return {2}


def test_the_pump_writes_back_until_there_is_room_and_drops_lost_leases() -> None:
    now = datetime(2030, 1, 1, tzinfo=datetime.now().astimezone().tzinfo)
    keeper = LeaseKeeper(name="x", lease_seconds=LEASE_SECONDS, register=lambda: None)
    keeper.leases, keeper.next_renewal = {1: 1, 2: 1}, now + timedelta(hours=1)
    window, stopping = WindowStub(), threading.Event()
    pump = Pump(pipeline=window, keeper=keeper, now=lambda: now, stopping=stopping, batch_size=3)
    assert pump.room_for_a_batch()
    assert window.written == 2 and window.room() >= 3
    assert keeper.leases == {1: 1}  # shard 2's results were fenced out: its lease is gone
    assert window.held == [{1, 2}, {1}]  # what a fan-out may draw children on, each time
    window.in_flight = 4
    stopping.set()
    assert not pump.room_for_a_batch()  # a stopping poller does not wait for room
    pump.settle()
    assert window.in_flight == 0
