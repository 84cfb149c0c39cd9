"""The schedules in the admin: list columns, pause/resume through confirmation and audit."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry

from scheduling.models import Job, JobStatus, Schedule
from scheduling.schedules.services import ScheduleSpec, schedule_create
from tests.support.console import operator_make
from tests.support.pollers import RecordingSink, future_base, poller_build

pytestmark = pytest.mark.django_db
URL = "/admin/scheduling/schedule/"


def _schedule(team, now, **fields):
    spec = ScheduleSpec(target_kind="handler", target="noop", every_seconds=60, **fields)
    return schedule_create(team=team, spec=spec, now=now)


def _post(client, action, pks, **extra):
    data = {"action": action, "_selected_action": [str(pk) for pk in pks], **extra}
    return client.post(URL, data)


def test_list_shows_next_occurrence_last_delivered_and_paused(client, team) -> None:
    base = future_base(days=-1)  # a day ago: its occurrences are due now
    schedule = _schedule(team, base, start_at=base)
    poller = poller_build(sink=RecordingSink())
    poller.iterate(now=base)
    poller.iterate(now=base + timedelta(seconds=61))
    delivered = Job.objects.filter(schedule_id=schedule.id, status=JobStatus.DELIVERED)
    assert delivered.count() == 2
    user = operator_make("viewer", perms=("view_schedule",))
    client.force_login(user)
    html = client.get(URL).content.decode()
    assert str(schedule.id) in html and "every 60s" in html
    assert "column-next_occurrence" in html and "column-last_delivered" in html
    page = client.get(URL)
    row = page.context["cl"].result_list[0]
    assert row.last_delivered_for == base + timedelta(seconds=60)


def test_pause_and_resume_need_a_reason_and_leave_an_audit_entry(client, team) -> None:
    base = future_base()
    schedule = _schedule(team, base, start_at=base)
    poller_build().iterate(now=base)
    assert Job.objects.filter(schedule_id=schedule.id, status=JobStatus.PENDING).exists()
    viewer = operator_make("viewer", perms=("view_schedule",))
    client.force_login(viewer)
    assert _post(client, "pause_schedules", [schedule.id]).status_code == 403
    operator = operator_make("operator", perms=("view_schedule", "change_schedule"))
    client.force_login(operator)
    page = _post(client, "pause_schedules", [schedule.id])
    assert page.status_code == 200 and b"are you sure" in page.content
    assert not Schedule.objects.get(id=schedule.id).paused  # nothing before confirming
    done = _post(client, "pause_schedules", [schedule.id], post="yes", reason="noisy receiver")
    assert done.status_code == 302 and done["Location"] == URL
    assert Schedule.objects.get(id=schedule.id).paused
    assert not Job.objects.filter(schedule_id=schedule.id, status=JobStatus.PENDING).exists()
    entry = LogEntry.objects.get(object_id=str(schedule.id))
    assert "Paused schedule" in entry.change_message and "noisy receiver" in entry.change_message
    _post(client, "resume_schedules", [schedule.id], post="yes", reason="fixed")
    assert not Schedule.objects.get(id=schedule.id).paused
    assert LogEntry.objects.filter(object_id=str(schedule.id)).count() == 2
