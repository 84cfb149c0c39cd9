"""The poller loop in one process, time controlled by explicit ``now`` (both databases)."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from polling.models import Poller, ShardCheckpoint, ShardLease
from polling.ownership import stall_bounds
from polling.ownership.registration import poller_drain, shard_pin
from scheduling import keys
from scheduling.jobs.services import job_schedule_many
from scheduling.models import InFlightBatch, Job
from tests.support.factories import job_spec
from tests.support.pollers import RecordingSink, future_base, poller_build

pytestmark = pytest.mark.django_db
W = timedelta(seconds=60)


def run_until_idle(poller, now, *, rounds=50):
    for _ in range(rounds):
        if (
            not poller.iterate(now=now)
            and not Job.objects.filter(status="pending", due_at__lte=now).exists()
        ):
            poller.iterate(now=now)  # checkpoints pass what the last pass drained
            return
    raise AssertionError("poller did not drain")


def test_catch_up_after_two_hours_delivers_oldest_first(team) -> None:
    base = future_base()
    sink = RecordingSink()
    poller = poller_build(sink=sink)
    poller.iterate(now=base)  # leases and checkpoints at ``base``
    offsets = [timedelta(minutes=m, seconds=s) for m in (10, 50, 110) for s in range(0, 40, 2)]
    specs = [job_spec(due_at=base + o) for o in offsets]
    jobs = [j for j, _ in job_schedule_many(team=team, specs=specs, now=base)]
    later = base + timedelta(hours=2, seconds=30)
    run_until_idle(poller, later)
    assert len(sink.seen) == len(jobs)
    assert Job.objects.filter(status="delivered", attempts=1).count() == len(jobs)
    by_shard: dict[int, list] = {}
    for job in sink.seen:
        by_shard.setdefault(job.shard, []).append(job.due_at)
    assert all(dues == sorted(dues) for dues in by_shard.values())
    # Oldest first overall: the first 10-minute job came before every 110-minute job.
    order = [j.bucket for j in sink.seen]
    assert order.index(keys.bucket_of(base + offsets[0], 60)) < order.index(
        keys.bucket_of(base + offsets[-1], 60)
    )
    last_closed = keys.bucket_of(later, 60) - W
    assert set(ShardCheckpoint.objects.values_list("last_drained", flat=True)) == {last_closed}


def test_empty_catch_up_takes_a_handful_of_queries_whatever_the_gap(settings) -> None:
    # Partitions ahead are created a few per iteration until the horizon exists:
    # storage, not the catch-up this counts.
    settings.SENDLATER_PARTITION_CHECK_SECONDS = 0
    base = future_base()
    counts = []
    for gap in (timedelta(minutes=2), timedelta(hours=2)):
        poller = poller_build(f"p-{gap.seconds}")
        poller.iterate(now=base)
        later = base + gap + timedelta(seconds=30)
        with CaptureQueriesContext(connection) as ctx:
            poller.iterate(now=later)
        counts.append(len(ctx.captured_queries))
        last_closed = keys.bucket_of(later, 60) - W
        assert set(ShardCheckpoint.objects.values_list("last_drained", flat=True)) == {last_closed}
        poller.shutdown()
        base = keys.bucket_of(later, 60) + 2 * W
    # Heartbeat, renew, re-acquire, frontier, one checkpoint statement...: no per-bucket query.
    assert counts[0] == counts[1] <= 12, counts


def test_late_write_behind_checkpoint_is_swept_and_delivered(team) -> None:
    base = future_base()
    sink = RecordingSink()
    poller = poller_build(sink=sink, sweep_every=0)
    now = base + timedelta(minutes=3, seconds=20)
    poller.iterate(now=now)
    assert set(ShardCheckpoint.objects.values_list("last_drained", flat=True)) == {base + 2 * W}
    # A writer read its clock when bucket base+1m was open and committed only now.
    stale_now = base + W + timedelta(seconds=1)
    ((job, _),) = job_schedule_many(
        team=team, specs=[job_spec(due_at=stale_now + timedelta(seconds=4))], now=stale_now
    )
    assert job.bucket == base + W
    poller.iterate(now=now + timedelta(seconds=1))
    job.refresh_from_db()
    open_bucket = keys.bucket_of(now, 60)
    assert (job.status, job.bucket, job.attempts) == ("delivered", open_bucket, 1)
    assert job.shard == keys.shard_of(job.id, 64)
    assert [j.id for j in sink.seen] == [job.id]


def test_retry_moves_row_and_dead_and_expired(team, settings) -> None:
    settings.SENDLATER_MAX_ATTEMPTS = 2
    base = future_base()
    specs = [job_spec(due_at=base + timedelta(seconds=i)) for i in range(3)]
    specs.append(job_spec(due_at=base + timedelta(seconds=3), expires_after_seconds=1))
    jobs = [j for j, _ in job_schedule_many(team=team, specs=specs, now=base)]
    retry, dead, ok, expired = jobs
    sink = RecordingSink(fail={retry.id}, dead={dead.id})
    poller = poller_build(sink=sink)
    now = base + timedelta(seconds=10)
    poller.iterate(now=now)
    for job in jobs:
        job.refresh_from_db()
    assert ok.status == "delivered" and ok.delivered_at >= ok.due_at
    assert dead.status == "dead" and dead.last_error == "gone"
    assert expired.status == "expired" and expired.id not in {j.id for j in sink.seen}
    assert retry.status == "pending" and retry.attempts == 1 and retry.last_error == "boom"
    assert retry.due_at >= now + timedelta(seconds=5)  # base 10 s, jitter down to half
    assert retry.bucket == keys.bucket_of(retry.due_at, 60)
    assert retry.shard == keys.shard_of(retry.id, 64)
    assert not InFlightBatch.objects.exists()  # every batch written back is forgotten
    later = retry.due_at + timedelta(seconds=1)
    run_until_idle(poller, later)
    retry.refresh_from_db()
    assert (retry.status, retry.attempts) == ("dead", 2)
    assert retry.last_error.startswith("gave up after 2 attempts")


def test_job_of_a_kind_without_sink_is_retried_not_dropped(team) -> None:
    from polling.dispatch.router import Router, sinks_build

    base = future_base()
    ((job, _),) = job_schedule_many(
        team=team,
        specs=[job_spec(due_at=base + timedelta(seconds=1))],
        now=base,
    )
    Job.objects.filter(id=job.id).update(target_kind="webhook", target="https://example.com/x")
    # Only a handler sink: webhooks are routed by default now, so leave that kind out.
    handler_only = {"handler": "polling.dispatch.handlers.HandlerSink"}
    poller = poller_build(sink=Router(sinks_build(concurrency=2, paths=handler_only)))
    poller.iterate(now=base + timedelta(seconds=5))
    job.refresh_from_db()
    assert job.status == "pending" and job.attempts == 1
    assert "no sink for target kind 'webhook'" in job.last_error


def test_handler_sink_delivers_and_retries_exceptions(team) -> None:
    from polling.dispatch.router import Router, sinks_build
    from scheduling.handlers import _registry, register

    @register("explodes")
    def explodes(delivery) -> None:
        raise RuntimeError("kaput")

    try:
        base = future_base()
        specs = [
            job_spec(due_at=base + timedelta(seconds=1), handler=h)
            for h in ("noop", "explodes", "log")
        ]
        jobs = [j for j, _ in job_schedule_many(team=team, specs=specs, now=base)]
        Job.objects.filter(id=jobs[2].id).update(target="unregistered")
        poller = poller_build(sink=Router(sinks_build(concurrency=4)))
        poller.iterate(now=base + timedelta(seconds=5))
    finally:
        _registry.pop("explodes", None)
    status = {j.id: Job.objects.get(id=j.id) for j in jobs}
    assert status[jobs[0].id].status == "delivered"
    assert status[jobs[1].id].status == "pending"
    assert "RuntimeError: kaput" in status[jobs[1].id].last_error
    assert status[jobs[2].id].status == "dead"


def test_drain_releases_shards_and_pins_override(team) -> None:
    base = future_base()
    a, b = poller_build("a"), poller_build("b")
    for poller in (a, b, a, b):  # a takes all, b arrives, a releases b's share, b takes it
        poller.iterate(now=base)
    owners = dict(ShardLease.objects.values_list("shard", "owner"))
    assert set(owners.values()) == {"a", "b"}
    moved = next(s for s, o in owners.items() if o == "a")
    shard_pin(shard=moved, poller="b")
    now = base + timedelta(seconds=1)
    for poller in (a, b):
        poller.iterate(now=now)
    assert ShardLease.objects.get(shard=moved).owner == "b"
    poller_drain(name="a")
    now = base + timedelta(seconds=10)
    for poller in (a, b):
        poller.iterate(now=now)
    assert set(ShardLease.objects.values_list("owner", flat=True)) == {"b"}
    assert Poller.objects.get(name="a").state == "draining"


def test_runpoller_rejects_bad_options() -> None:
    for args, word in [
        (["--batch-size", "0"], "--batch-size"),
        (["--concurrency", "0"], "--concurrency"),
        (["--poll-interval", "0"], "--poll-interval"),
        (["--name", " "], "--name"),
    ]:
        with pytest.raises(CommandError, match=word):
            call_command("runpoller", *args)


def test_runpoller_once_and_lag(team) -> None:
    specs = [job_spec(in_seconds=-5) for _ in range(20)]
    job_schedule_many(team=team, specs=specs)
    try:
        call_command("runpoller", "--once", "--name", "once")
    finally:
        # runpoller bounds its thread's connections (this test's main thread): undone, or
        # every later connection of the test process would carry the bound, pooled ones
        # too (tests/integration/test_stallbound.py expects none).
        stall_bounds.session_bound_remove()
    assert Job.objects.filter(status="delivered").count() == 20
    out = StringIO()
    call_command("lag", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert len(data["shards"]) == 64 and sum(s["due_backlog"] for s in data["shards"]) == 0
    out = StringIO()
    call_command("lag", stdout=out)
    assert "64 shards, due backlog 0" in out.getvalue()


def test_pollers_beyond_the_shard_count_are_standbys(monkeypatch, caplog) -> None:
    from polling.ownership import keeper

    monkeypatch.setattr(keeper, "shard_count_max", lambda: 2)
    base = future_base()
    pollers = [poller_build(f"s{i}") for i in range(4)]
    for _ in range(2):
        for poller in pollers:
            poller.iterate(now=base)
    held = [set(p.leases) for p in pollers]
    assert sorted(s for h in held for s in h) == [0, 1]
    standbys = [p.name for p, h in zip(pollers, held, strict=True) if not h]
    assert len(standbys) >= 2
    for name in standbys:
        assert f"poller {name}: standby" in caplog.text


def test_failed_write_back_strands_nothing(team, monkeypatch) -> None:
    from polling.writing import writeback

    base = future_base()
    ((job, _),) = job_schedule_many(
        team=team, specs=[job_spec(due_at=base + timedelta(seconds=1))], now=base
    )
    sink = RecordingSink()
    poller = poller_build(sink=sink)
    real = writeback.write_back

    def broken(**kwargs):
        raise RuntimeError("connection lost during write-back")

    monkeypatch.setattr(writeback, "write_back", broken)
    now = base + timedelta(seconds=5)
    assert poller.step(now=now) is False
    job.refresh_from_db()
    assert job.status == "pending" and poller.leases == {}
    (batch,) = InFlightBatch.objects.all()  # the stranded batch, of the dropped epoch
    assert not ShardLease.objects.filter(owner="p1").exists()
    monkeypatch.setattr(writeback, "write_back", real)
    poller.step(now=now + timedelta(seconds=1))
    job.refresh_from_db()
    # Delivered twice (the duplicate a crash allows), counted once: the one write.
    assert (job.status, job.attempts) == ("delivered", 1)
    assert ShardLease.objects.get(shard=job.shard).epoch == batch.epoch + 1
    assert not InFlightBatch.objects.exists()
    assert [j.id for j in sink.seen] == [job.id, job.id]
    assert [j.attempt for j in sink.seen] == [1, 1]


def test_buckets_are_read_with_their_own_shard_count_across_a_cutover(team) -> None:
    from scheduling.jobs.services import cutover_schedule

    base = future_base()
    cutover = base + timedelta(minutes=10)
    cutover_schedule(shard_count=8, effective_from=cutover, now=base)
    specs = [job_spec(due_at=base + timedelta(minutes=5, seconds=i)) for i in range(30)]
    specs += [job_spec(due_at=cutover + timedelta(minutes=5, seconds=i)) for i in range(30)]
    jobs = [j for j, _ in job_schedule_many(team=team, specs=specs, now=base)]
    assert {j.shard for j in jobs[30:]} <= set(range(8))
    assert len({j.shard for j in jobs[:30]} - set(range(8))) > 0
    poller = poller_build()
    later = cutover + timedelta(minutes=20, seconds=30)
    run_until_idle(poller, later)
    assert Job.objects.filter(status="delivered", attempts=1).count() == 60
    assert ShardLease.objects.count() == 64
    last_closed = keys.bucket_of(later, 60) - W
    assert set(ShardCheckpoint.objects.values_list("last_drained", flat=True)) == {last_closed}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite's clock is the machine's")
def test_a_poller_whose_machine_clock_is_5_minutes_fast_stamps_with_the_database_clock(
    team,
) -> None:
    """What a sink stamps (webhook-timestamp, an attempt's started_at) is the
    database's time the poller read this iteration, not the skewed wall clock."""
    import time_machine

    from polling.common.database_time import DB_TIME
    from polling.dispatch.handlers import HandlerSink
    from scheduling.jobs.selectors import delivery_attempt_list
    from scheduling.sharding.clock import db_now

    seen = []

    class Stamping(HandlerSink):
        def submit(self, jobs, done):
            seen.append((DB_TIME.now(), db_now()))
            return super().submit(jobs, done)

    [(job, _)] = job_schedule_many(team=team, specs=[job_spec(in_seconds=-1)])
    poller = poller_build(sink=Stamping(concurrency=2))
    skew = timedelta(minutes=5)
    with time_machine.travel(db_now() + skew, tick=True):
        from datetime import UTC, datetime

        assert datetime.now(UTC) - db_now() > skew - timedelta(seconds=5)  # the skew is real
        for _ in range(3):
            poller.iterate()
            if seen:
                break
    poller.sink.close()
    [(stamped, database)] = seen
    assert abs((stamped - database).total_seconds()) < 2
    (attempt,) = delivery_attempt_list(job=Job.objects.get(id=job.id))
    assert attempt.result == "delivered"
    assert abs((attempt.started_at - database).total_seconds()) < 2


def test_pause_keeps_a_steady_cadence_while_jobs_arrive(team) -> None:
    """Idle: the whole (jittered) poll interval. Jobs claimed: the interval less the
    pass's own time, so a long pass does not add a whole interval to every job's lag."""
    base = future_base()
    poller = poller_build(sink=RecordingSink())
    poller.poll_interval = 1.0
    poller.iterate(now=base)
    assert poller.claimed_last == 0
    assert 0.8 <= poller._pause(0.5) <= 1.2
    job_schedule_many(team=team, specs=[job_spec(due_at=base + timedelta(seconds=5))], now=base)
    poller.iterate(now=base + timedelta(seconds=6))
    assert poller.claimed_last == 1
    assert 0.3 <= poller._pause(0.5) <= 0.7
    assert poller._pause(1.5) == 0.0  # a pass longer than the interval: straight on
    poller.iterate(now=base + timedelta(seconds=7))  # nothing new: idle again
    assert poller.claimed_last == 0


def test_pause_ends_when_the_next_pending_job_falls_due(team) -> None:
    base = future_base()
    poller = poller_build(sink=RecordingSink())
    poller.poll_interval = 1.0
    poller.iterate(now=base)
    job_schedule_many(
        team=team, specs=[job_spec(due_at=base + timedelta(seconds=10, milliseconds=300))], now=base
    )
    poller.iterate(now=base + timedelta(seconds=10))  # due in 0.3 s: seen ahead, not claimed
    assert poller.claimed_last == 0
    assert poller.next_due == base + timedelta(seconds=10, milliseconds=300)
    assert 0.25 <= poller._pause(0.0) <= 0.3
    # Due sooner than a tenth of the interval (0.5 s ahead, the floor 1 s; the margin
    # leaves the pass itself real time to run without the job falling due in it).
    poller.poll_interval = 10.0
    poller.iterate(now=base + timedelta(seconds=9, milliseconds=800))
    assert poller.claimed_last == 0
    assert poller._pause(0.0) == pytest.approx(1.0)  # a tenth of the interval at least
    poller.iterate(now=base + timedelta(seconds=11))
    assert poller.claimed_last == 1 and poller.next_due is None
