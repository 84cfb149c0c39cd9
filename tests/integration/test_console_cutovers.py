"""Reshard cutovers from the console and the CLI; moveshard and drainpoller."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import CommandError, call_command

from polling.models import Poller, ShardLease
from scheduling import keys
from scheduling.models import Bucket, JobStatus, ShardCountSchedule
from scheduling.sharding.clock import db_now
from scheduling.sharding.cutovers import cutover_earliest
from tests.support.console import job_make, operator_make, poller_make, shards_make

pytestmark = pytest.mark.django_db


@pytest.fixture
def planner(client):
    user = operator_make("planner", perms=("schedule_cutover",))
    client.force_login(user)
    return user


def _fmt(moment) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M")


def test_preview_then_confirm_schedules_and_audits(client, planner, team) -> None:
    now = db_now()
    start = cutover_earliest(now) + timedelta(hours=1)
    # A busy bucket ahead sets the peak; one recorded bucket after the cutover.
    busy = keys.bucket_of(now + timedelta(hours=2), 60)
    for _ in range(6):
        job_make(team, shard=0, due_at=busy + timedelta(seconds=5))
    Bucket.objects.create(start=busy, shard_count=64)
    job_make(
        team,
        shard=1,
        due_at=now - timedelta(minutes=3),
        status=JobStatus.DELIVERED,
        delivered_at=now - timedelta(minutes=2),
    )
    form = {"shard_count": 128, "effective_from": _fmt(start), "reason": "more pollers"}
    page = client.post("/admin/console/cutovers/", form)
    assert page.status_code == 200
    preview = page.context["preview"]
    assert preview.peak.per_minute == 6 and preview.peak.delivered_last_day == 1
    assert preview.proposed.shards == 128 and preview.current.shards == 64
    assert preview.proposed.jobs_per_partition == pytest.approx(6 / 128)
    assert preview.recorded_after == 1 and preview.recorded_after_other_count == 1
    assert 'id="cutover-confirm"' in page.content.decode()
    assert not ShardCountSchedule.objects.filter(shard_count=128).exists()
    done = client.post("/admin/console/cutovers/", {**form, "confirm": "yes"})
    assert done.status_code == 302
    row = ShardCountSchedule.objects.get(shard_count=128)
    assert row.effective_from == start and row.reason == "more pollers"
    assert "Reason: more pollers" in LogEntry.objects.get(object_id=str(row.pk)).change_message
    listing = client.get("/admin/console/cutovers/")
    states = {(r.shard_count, r.state) for r in listing.context["schedule"]}
    assert (128, "future") in states and (64, "in force") in states


@pytest.mark.parametrize(
    ("shards", "offset", "error"),
    [
        (8, timedelta(seconds=0), "open bucket plus the margin"),
        (0, timedelta(hours=1), "greater than or equal to 1"),
        (10**6, timedelta(hours=1), "less than or equal to"),
    ],
)
def test_form_refuses_bad_input(client, planner, shards, offset, error) -> None:
    now = db_now()
    start = keys.bucket_of(now, 60) + offset
    page = client.post(
        "/admin/console/cutovers/",
        {"shard_count": shards, "effective_from": _fmt(start), "reason": "r"},
    )
    assert page.status_code == 200 and page.context["preview"] is None
    assert error in page.content.decode()


def test_reshard_command(team) -> None:
    start = cutover_earliest(db_now()) + timedelta(hours=1)
    out = StringIO()
    call_command("reshard", "--shards", "32", "--effective-from", start.isoformat(), stdout=out)
    assert "scheduled: 32 shards" in out.getvalue()
    assert "jobs per partition per bucket" in out.getvalue()
    assert ShardCountSchedule.objects.filter(shard_count=32, effective_from=start).exists()
    with pytest.raises(CommandError, match="not an ISO 8601"):
        call_command("reshard", "--shards", "8", "--effective-from", "tomorrow")
    with pytest.raises(CommandError, match="UTC offset"):
        call_command("reshard", "--shards", "8", "--effective-from", "2030-01-01T00:00")
    with pytest.raises(CommandError, match="at or after"):
        call_command("reshard", "--shards", "8", "--effective-from", "2001-01-01T00:00Z")
    with pytest.raises(CommandError, match="between 1 and"):
        later = (start + timedelta(hours=1)).isoformat()
        call_command("reshard", "--shards", "0", "--effective-from", later)
    with pytest.raises(CommandError, match="already starts"):
        call_command("reshard", "--shards", "16", "--effective-from", start.isoformat())


def test_moveshard_and_drainpoller_commands() -> None:
    now = db_now()
    shards_make(4)
    poller_make("p1", now=now)
    poller_make("gone", now=now, age_seconds=900)
    call_command("moveshard", "1", "2", "--to", "p1", stdout=StringIO())
    assert set(ShardLease.objects.filter(pinned_to="p1").values_list("shard", flat=True)) == {1, 2}
    call_command("moveshard", "2", "--unpin", stdout=StringIO())
    assert ShardLease.objects.get(shard=2).pinned_to is None
    with pytest.raises(CommandError, match=r"no lease row for shard\(s\) \[9\]; shards are 0..3"):
        call_command("moveshard", "9", "--to", "p1")
    with pytest.raises(CommandError, match="no poller named 'nope'"):
        call_command("moveshard", "1", "--to", "nope")
    with pytest.raises(CommandError, match="is not live"):
        call_command("moveshard", "1", "--to", "gone")
    call_command("drainpoller", "p1", stdout=StringIO())
    assert Poller.objects.get(name="p1").state == "draining"
    call_command("drainpoller", "p1", "--resume", stdout=StringIO())
    assert Poller.objects.get(name="p1").state == "active"
    with pytest.raises(CommandError, match="no poller named 'nope'"):
        call_command("drainpoller", "nope")
