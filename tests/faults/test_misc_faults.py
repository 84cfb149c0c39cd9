"""Clock skew, one idempotency key raced 50 times, a 10x burst, the late-write race."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from scheduling import keys
from scheduling.jobs.services import JobSpec, job_schedule_many
from scheduling.sharding.clock import db_now
from tests.faults.cluster import BUCKET_SECONDS, Cluster, sql
from tests.faults.conftest import report_and_assert
from tests.faults.invariants import check
from tests.faults.scenario import DRAIN_TIMEOUT_SECONDS, run
from tests.support.factories import team_create
from tests.support.heldwrite import HeldWrite

pytestmark = pytest.mark.faults_full

SKEW_SECONDS = 300


def test_poller_clocks_skewed_by_minutes_never_fire_early(make_cluster) -> None:
    """p0's wall clock runs 5 minutes fast, p1's 5 minutes slow: the pollers read
    now from the database, so neither fires early nor stalls."""
    cluster = make_cluster(skew={"p0": SKEW_SECONDS, "p1": -SKEW_SECONDS})
    report = run(cluster, "clocks skewed +-5 min", seed=1, fault=lambda c: None, fault_at=0)
    assert report.early == 0
    # webhook-timestamp is the database's clock (receiver and database share this
    # host), not the skewed sender's: Standard Webhooks receivers (±5 min) accept it.
    receipts = cluster.receiver.snapshot()
    offsets = [r.timestamp_header - r.at for r in receipts]
    assert max(abs(o) for o in offsets) < 5, (min(offsets), max(offsets))
    # ...and both skewed pollers did deliver some of them (the audit trail names the
    # poller behind each job's one write: a delivery writes no attempt row).
    senders = {p for (p,) in sql("SELECT DISTINCT writer FROM faults_job_write")}
    assert {"p0", "p1"} <= senders, senders


def test_fifty_concurrent_identical_submissions_make_one_job(make_cluster) -> None:
    cluster = make_cluster()
    body = {
        "due_at": (db_now() + timedelta(seconds=2)).isoformat(),
        "callback_url": cluster.receiver.url("/hook"),
        "payload": {"once": True},
        "idempotency_key": "fifty-at-once",
    }
    start = threading.Barrier(50)

    def post(_: int) -> tuple[int, str]:
        start.wait(timeout=30)
        status, answer = cluster.post("/api/v1/jobs", body)
        return status, answer.get("id", "")

    with ThreadPoolExecutor(50) as pool:
        results = list(pool.map(post, range(50)))
    statuses = sorted(status for status, _ in results)
    assert statuses.count(201) == 1 and statuses.count(200) == 49, statuses
    assert len({job_id for _, job_id in results}) == 1
    cluster.drain(DRAIN_TIMEOUT_SECONDS)
    report = check(cluster, "50 identical submissions, one key")
    report_and_assert(report)
    assert report.jobs == 1 and report.delivered == 1 and report.duplicates == 0


def test_ten_times_burst_into_one_popular_bucket(make_cluster) -> None:
    """200 jobs over 10 s (about 100 a bucket), plus 900 more into one bucket: 10x."""
    cluster = make_cluster()

    def burst(c: Cluster) -> None:
        c.fault_end(c.fault_begin("10x burst into one bucket"))

    run(
        cluster,
        "10x burst into one bucket",
        seed=1,
        fault=burst,
        n=1100,
        hot=(6.0, 900 / 1100, float(BUCKET_SECONDS)),
        fault_at=6.0 + BUCKET_SECONDS,
        duration=14.0,
    )


def test_write_committing_after_its_bucket_closed_is_swept_and_delivered(make_cluster) -> None:
    """A transaction writes 20 jobs into the open bucket and commits only after the
    pollers closed that bucket and moved every checkpoint past it: the sweep moves
    them to the open bucket and they are delivered, none early, none lost."""
    cluster = make_cluster()
    team = team_create(slug="late-writer")

    def write() -> list:
        now = db_now()
        specs = [
            JobSpec(
                due_at=now + timedelta(seconds=0.5),
                target_kind="webhook",
                target=cluster.receiver.url("/hook"),
                payload={"late": i},
            )
            for i in range(20)
        ]
        return [job for job, _ in job_schedule_many(team=team, specs=specs)]

    held = HeldWrite(write, hold_seconds=60)
    written = held.start()
    bucket = written[0].bucket
    shards = sorted({job.shard for job in written})
    window = cluster.fault_begin("transaction commits after its bucket closed")
    deadline = time.monotonic() + 4 * BUCKET_SECONDS
    while True:
        (passed,) = sql(
            "SELECT bool_and(last_drained >= %s) FROM polling_shardcheckpoint"
            " WHERE shard = ANY(%s)",
            [bucket, shards],
        )[0]
        if passed:
            break
        assert time.monotonic() < deadline, "checkpoints never passed the writer's bucket"
        time.sleep(0.1)
    held.commit()
    cluster.fault_end(window)
    cluster.drain(DRAIN_TIMEOUT_SECONDS)
    report = check(cluster, "late write behind the checkpoint")
    report_and_assert(report)
    ids = [str(job.id) for job in written]
    rows = sql("SELECT bucket, status FROM scheduling_job WHERE id::text = ANY(%s)", [ids])
    assert all(status == "delivered" and b > bucket for b, status in rows)
    assert keys.bucket_of(bucket, BUCKET_SECONDS) == bucket
