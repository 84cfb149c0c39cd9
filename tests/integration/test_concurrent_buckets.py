"""Two processes racing their first writes into one bucket record one shard count."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduling import keys
from scheduling.models import Bucket, Job
from scheduling.sharding.clock import db_now
from tests.support.factories import team_create
from tests.support.procs import run_django_script

WRITER = """
import sys
from datetime import datetime, timedelta
from scheduling.models import Team
from scheduling.jobs.services import JobSpec, job_schedule_many
team = Team.objects.get(slug="acme")
due = datetime.fromisoformat(sys.argv[1] if len(sys.argv) > 1 else {due!r})
for round in range(10):
    specs = [JobSpec(due_at=due + timedelta(minutes=round, seconds=i % 60), target_kind="handler",
                     target="noop", payload={{"i": i}}) for i in range(200)]
    job_schedule_many(team=team, specs=specs)
print("ok")
"""


@pytest.mark.django_db(transaction=True)
def test_concurrent_bulk_writes_record_one_count_per_bucket() -> None:
    team_create(slug="acme")
    due = keys.bucket_of(db_now() + timedelta(hours=2), 60)
    procs = [run_django_script(WRITER.format(due=due.isoformat())) for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.strip() == "ok"
    assert Job.objects.count() == 2 * 10 * 200
    buckets = list(Bucket.objects.order_by("start").values_list("start", "shard_count"))
    assert [b for b, _ in buckets] == [due + timedelta(minutes=m) for m in range(10)]
    assert all(count == 64 for _, count in buckets)
    for job in Job.objects.only("id", "shard", "bucket").iterator():
        assert job.shard == keys.shard_of(job.id, 64)
