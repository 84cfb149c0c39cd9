"""Cancel against a poller's read, with real processes on PostgreSQL: a job is never
both canceled and delivered (the lock order of ``scheduling.jobs.inflight``).

There is no per-row claim: a poller reads due pending rows under its lease and
records the batch in flight, in one transaction that holds the shard's window lock.
A cancel holds the job's row lock, then takes the window lock in shared mode, then
looks for the job in the shard's batches. Whichever gets the window lock first wins.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction

from polling.ownership import leases
from polling.ownership.registration import shard_rows_ensure
from scheduling.errors import JobNotPending
from scheduling.jobs import cancels, services
from scheduling.jobs.inflight import JobInFlight, window_lock_shared
from scheduling.models import Job, JobStatus
from scheduling.sharding.clock import db_now
from scheduling.storage.jobrows import job_for_update
from scheduling.storage.partitions import partitions_ensure
from tests.e2e.test_pollers_multiprocess import procs, schedule, wait_for  # noqa: F401
from tests.support.procs import POLLER_PROCESSES, run_django_script
from tests.support.recording import deliveries

pytestmark = POLLER_PROCESSES


def _due_job(team) -> Job:
    job, _ = services.job_schedule(
        team=team, due_at=db_now() - timedelta(seconds=1), target_kind="handler", target="noop"
    )
    return job


def _due_job_leased(team) -> tuple[Job, int]:
    """A job due now, and the epoch of poller "x"'s lease on its shard."""
    job = _due_job(team)
    shard_rows_ensure(shard_count=64)
    now = db_now()
    epoch = leases.lease_acquire(
        owner="x", shards=[job.shard], now=now, until=now + timedelta(minutes=5)
    )[job.shard]
    return job, epoch


def _waiting_for_advisory_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        return cursor.fetchone()[0] > 0


def test_a_cancel_waits_for_a_read_in_progress_and_answers_409(team) -> None:
    """The poller's read holds the window lock: the cancel waits for its batch row
    and answers 409; without the wait it would have canceled a job being delivered."""
    job, epoch = _due_job_leased(team)
    reader = run_django_script(
        "import time\n"
        "from datetime import datetime\n"
        "from polling.reading import take\n"
        "from scheduling.sharding.clock import db_now\n"
        "real = take.ids_text\n"
        "def slow(ids):\n"
        "    text = real(ids)\n"
        "    print('read', flush=True)\n"
        "    time.sleep(2)  # between the read and the batch row, window lock held\n"
        "    return text\n"
        "take.ids_text = slow\n"
        f"jobs = take.batch_take(owner='x', epoch={epoch}, "
        f"bucket=datetime.fromisoformat('{job.bucket.isoformat()}'), shard={job.shard}, "
        "now=db_now(), limit=10)\n"
        "print([str(j.id) for j in jobs])\n"
    )
    assert reader.stdout is not None
    assert reader.stdout.readline().strip() == "read", reader.stderr.read() if reader.stderr else ""
    with pytest.raises(JobInFlight):
        services.job_cancel(team=team, job_id=job.id)
    out, err = reader.communicate(timeout=30)
    assert reader.returncode == 0, err
    assert str(job.id) in out
    assert Job.objects.get(id=job.id).status == JobStatus.PENDING  # in flight, not canceled


def test_a_read_waits_for_a_cancel_in_progress_and_skips_the_job(team) -> None:
    """The cancel holds the job's row lock and the shared window lock: the poller's
    read waits, then no longer sees the job (its snapshot is taken after the lock)."""
    job, epoch = _due_job_leased(team)
    with transaction.atomic():
        locked = job_for_update(team=team, job_id=job.id)
        window_lock_shared([locked.shard])
        reader = run_django_script(
            "from polling.reading import take\n"
            "from scheduling.sharding.clock import db_now\n"
            "from datetime import datetime\n"
            f"jobs = take.batch_take(owner='x', epoch={epoch}, "
            f"bucket=datetime.fromisoformat('{job.bucket.isoformat()}'), shard={job.shard}, "
            "now=db_now(), limit=10)\n"
            "print([str(j.id) for j in jobs])\n"
        )
        wait_for(_waiting_for_advisory_lock, 30, "the read to wait for the window lock", 0.02)
        Job.objects.filter(id=job.id).update(status=JobStatus.CANCELED)
    out, err = reader.communicate(timeout=30)
    assert reader.returncode == 0, err
    assert str(job.id) not in out
    assert Job.objects.get(id=job.id).status == JobStatus.CANCELED


def test_cancels_racing_two_pollers_never_cancel_a_delivered_job(procs, tmp_path) -> None:  # noqa: F811
    """Cancels, reschedules and bulk cancels aimed at jobs falling due right now,
    while two pollers deliver them: every job ends either canceled and never
    delivered, or delivered (the cancel answered 409)."""
    n = 3000
    # Today's partition exists before the jobs are written: rows written into the
    # DEFAULT partition move out when a poller creates it, and a query planned just
    # before that ATTACH may miss them for a moment (not what this test is about).
    partitions_ensure(now=db_now(), days=2)
    schedule(n, start_in=2, over=8)
    pollers = [procs(name, "--batch-size", "50") for name in ("r1", "r2")]
    rng = random.Random(7)
    canceled: set[str] = set()
    refused: set[str] = set()
    in_flight = 0
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        now = db_now()
        near = list(
            Job.objects.filter(
                status=JobStatus.PENDING,
                due_at__gte=now - timedelta(milliseconds=300),
                due_at__lte=now + timedelta(milliseconds=100),
            ).values_list("id", "team_id")[:20]
        )
        if not near and not Job.objects.filter(status=JobStatus.PENDING).exists():
            break
        for job_id, team_id in near:
            team = Job.objects.get(id=job_id).team
            try:
                if rng.random() < 0.8:
                    services.job_cancel(team=team, job_id=job_id)
                else:
                    assert cancels.job_cancel_many(team=team, ids=[job_id]) in (0, 1)
                    if Job.objects.get(id=job_id).status != JobStatus.CANCELED:
                        raise JobNotPending("bulk cancel left it")
                canceled.add(str(job_id))
            except JobNotPending as error:
                refused.add(str(job_id))
                in_flight += isinstance(error, JobInFlight)
            assert team_id == team.id
    wait_for(
        lambda: not Job.objects.filter(status=JobStatus.PENDING).exists(), 60, "all pending done"
    )
    for proc in pollers:
        proc.terminate()
        proc.wait(timeout=30)
    delivered = {job_id for job_id, *_ in deliveries(tmp_path)}
    statuses = dict(Job.objects.values_list("id", "status"))
    assert canceled and refused, "the cancels never met the pollers: the race was not run"
    assert not canceled & delivered, "canceled jobs were delivered"
    assert {statuses[uuid.UUID(i)] for i in canceled} == {JobStatus.CANCELED}
    assert delivered == {str(i) for i, s in statuses.items() if s == JobStatus.DELIVERED}
    print(json.dumps({"jobs": n, "canceled": len(canceled), "refused": len(refused),
                      "refused_in_flight": in_flight}))  # fmt: skip
