"""Operator moves under load (the services the admin calls) and a reshard cutover."""

from __future__ import annotations

import time
import uuid

import pytest

from polling.ownership import registration
from scheduling import keys
from scheduling.sharding.clock import db_now
from scheduling.sharding.cutovers import cutover_earliest, cutover_schedule
from tests.faults.cluster import LEASE_SECONDS, Cluster, sql
from tests.faults.scenario import run

MOVE_TIMEOUT_SECONDS = 5 * LEASE_SECONDS


def _owners() -> dict[int, str | None]:
    return dict(sql("SELECT shard, owner FROM polling_shardlease"))


def _wait(predicate, what: str, timeout: float = MOVE_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"operator move not done in {timeout}s: {what}"
        time.sleep(0.05)


def _operator_moves(cluster: Cluster) -> None:
    """Pin six of p0's shards to p1, drain p2, release one of p1's leases by hand
    (fenced on the epoch the operator saw), then resume p2 and unpin."""
    window = cluster.fault_begin("operator: pin, drain, release, resume, unpin")
    moved = sorted(s for s, o in _owners().items() if o == "p0")[:6]
    for shard in moved:
        assert registration.shard_pin(shard=shard, poller="p1")
    _wait(lambda: all(_owners()[s] == "p1" for s in moved), "pinned shards on p1")
    registration.poller_drain(name="p2")
    _wait(lambda: "p2" not in _owners().values(), "p2 drained")
    shard, owner, epoch = sql(
        "SELECT l.shard, l.owner, l.epoch FROM polling_shardlease l WHERE l.owner = 'p1'"
        " ORDER BY (SELECT COALESCE(sum(f.job_count), 0) FROM scheduling_inflightbatch f"
        " WHERE f.shard = l.shard) DESC LIMIT 1"
    )[0]
    (claimed,) = sql(
        "SELECT COALESCE(sum(job_count), 0) FROM scheduling_inflightbatch WHERE shard = %s",
        [shard],
    )[0]
    assert registration.lease_release(shard=shard, owner=owner, epoch=epoch)
    window.in_flight = claimed + 25  # its in-flight batch, or the one it was claiming
    registration.poller_resume(name="p2")
    for s in moved:
        registration.shard_unpin(shard=s)
    _wait(lambda: "p2" in _owners().values(), "p2 back")
    cluster.fault_end(window)


@pytest.mark.parametrize("seed", [1])
def test_operator_moves_and_drain_under_load(make_cluster, seed: int) -> None:
    run(make_cluster(), "ownership moves + drain", seed=seed, fault=_operator_moves, fault_at=3)


CUTOVER_SHARDS = 96


def test_reshard_cutover_under_load_with_racing_writes(make_cluster) -> None:
    """64 -> 96 shards from a bucket ~10 s ahead, while the racing writer aims at
    that bucket's first and last seconds. Every bucket keeps the count it was
    first written with; every job is on the shard its bucket's count gives."""
    seed = 1
    cluster = make_cluster()
    start = cutover_earliest(db_now())
    cutover_schedule(shard_count=CUTOVER_SHARDS, effective_from=start, reason="fault suite")
    writes = {"around": start, "lo": -2.0, "hi": 2.0, "every": 0.1}
    wait = (start - db_now()).total_seconds()
    run(
        cluster,
        "reshard cutover 64 -> 96",
        seed=seed,
        fault=lambda c: None,
        span=wait + 6,
        fault_at=0,
        duration=wait + 4,
        writer=writes,
    )
    counts = dict(sql("SELECT start, shard_count FROM scheduling_bucket"))
    assert {c for b, c in counts.items() if b >= start} == {CUTOVER_SHARDS}
    assert {c for b, c in counts.items() if b < start} == {64}
    (before, after) = sql(
        "SELECT count(*) FILTER (WHERE j.bucket < %s), count(*) FILTER (WHERE j.bucket >= %s)"
        " FROM scheduling_job j",
        [start, start],
    )[0]
    assert before > 0 and after > 0
    misplaced = [
        job_id
        for job_id, bucket, shard in sql("SELECT id, bucket, shard FROM scheduling_job")
        if shard != keys.shard_of(uuid.UUID(str(job_id)), counts[bucket])
    ]
    assert not misplaced
    high = sql("SELECT count(*) FROM scheduling_job WHERE shard >= 64 AND status = 'delivered'")
    assert high[0][0] > 0  # the new shard indices were owned and drained
