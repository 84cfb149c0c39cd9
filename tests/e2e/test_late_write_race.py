"""The slow-commit race on PostgreSQL: a write commits after its bucket was passed.

A writer transaction inserts into bucket B (open by its clock) and stays
uncommitted while the poller closes B and moves the checkpoint past it. When the
writer finally commits, the row sits behind the checkpoint: the sweep must move
it to the open bucket and the poller deliver it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from polling.models import ShardCheckpoint
from scheduling import keys
from scheduling.jobs.services import job_schedule_many
from scheduling.models import Job
from tests.support.factories import job_spec, team_create
from tests.support.heldwrite import HeldWrite
from tests.support.pollers import RecordingSink, future_base, poller_build

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs two concurrent connections with real isolation (PostgreSQL)",
    ),
]

W = timedelta(seconds=60)


def test_uncommitted_write_behind_checkpoint_is_swept_and_delivered() -> None:
    team = team_create(slug="race")
    base = future_base()
    sink = RecordingSink()
    poller = poller_build(sink=sink, sweep_every=0)
    poller.iterate(now=base)
    stale_now = base + W + timedelta(seconds=1)  # bucket base+1m is open for the writer
    held = HeldWrite(
        lambda: job_schedule_many(
            team=team, specs=[job_spec(due_at=stale_now + timedelta(seconds=2))], now=stale_now
        ),
        hold_seconds=30,
    )
    written = held.start()
    now = base + 3 * W + timedelta(seconds=20)
    poller.iterate(now=now)  # closes base+1m and base+2m: the row is not visible yet
    assert set(ShardCheckpoint.objects.values_list("last_drained", flat=True)) == {base + 2 * W}
    held.commit()
    ((job, _),) = written
    job.refresh_from_db()
    assert (job.status, job.bucket) == ("pending", base + W)  # stranded behind the checkpoint
    poller.iterate(now=now + timedelta(seconds=1))
    job.refresh_from_db()
    assert (job.status, job.bucket, job.attempts) == ("delivered", keys.bucket_of(now, 60), 1)
    assert job.shard == keys.shard_of(job.id, 64)
    assert [j.id for j in sink.seen] == [job.id]
    assert Job.objects.count() == 1
