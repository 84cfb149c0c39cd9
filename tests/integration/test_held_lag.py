"""Jobs held by flow control are not shard lag (issue 30, item 2): the lag command, the
dashboard and ``/metrics`` count only what the service could send now, and show the
held jobs beside them, per shard and per key (both databases)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from polling.console.dashboard import dashboard_build
from polling.ownership.registration import shard_rows_ensure
from polling.reading.held_backlog import HeldGroup, backlog_split
from polling.reading.lag import shard_lag_report
from scheduling.flow.models import FlowControl, FlowSlot
from scheduling.flow.services import flow_limits_set, flow_pause_set
from scheduling.jobs.services import job_schedule_many
from scheduling.models import Job
from scheduling.sharding.buckets import shard_count_max
from scheduling.sharding.clock import db_now
from tests.support.console import operator_make
from tests.support.factories import job_spec
from tests.support.pollers import poller_build

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _shards(db) -> None:
    shard_rows_ensure(shard_count=shard_count_max())


def _due(team, count: int, *, ago: float, key: str | None = None) -> list:
    """``count`` jobs due ``ago`` seconds ago (database clock), written in their own bucket."""
    due = db_now() - timedelta(seconds=ago)
    specs = [job_spec(due_at=due + timedelta(milliseconds=i)) for i in range(count)]
    jobs = [j for j, _ in job_schedule_many(team=team, specs=specs, now=due - timedelta(1))]
    if key is not None:
        Job.objects.filter(id__in=[j.id for j in jobs]).update(flow_control_key=key)
    return [j.id for j in jobs]


def _lag_json() -> dict:
    out = StringIO()
    call_command("lag", "--json", stdout=out)
    return json.loads(out.getvalue())


def _scrape(client: Client, settings) -> str:
    settings.SENDLATER_METRICS_TOKEN = "t0ken"
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer t0ken")
    assert response.status_code == 200
    return response.content.decode()


def _per_shard(text: str, name: str) -> list[float]:
    return [float(v) for v in re.findall("^" + name + r'\{shard="\d+"\} (\S+)$', text, re.M)]


def _assert_held_not_lag(client, settings, *, key: str, reason: str, held: int) -> None:
    """Every view of lag says near zero, and each names ``held`` jobs of ``key`` held."""
    report = shard_lag_report(now=db_now())
    assert max(r.lag_seconds for r in report.rows) < 2.0
    assert sum(r.due_backlog for r in report.rows) == 0
    assert all(r.oldest_due_age_seconds is None for r in report.rows)
    assert sum(r.held for r in report.rows) == held
    assert max(r.held_oldest_age_seconds or 0 for r in report.rows) >= 25
    [only] = report.held_keys
    assert (only.team, only.key, only.reason, only.jobs) == ("acme", key, reason, held)

    payload = _lag_json()
    assert max(s["lag_seconds"] for s in payload["shards"]) < 2.0
    assert sum(s["held"] for s in payload["shards"]) == held
    assert [(k["key"], k["reason"], k["jobs"]) for k in payload["held_keys"]] == [
        (key, reason, held)
    ]
    text_out = StringIO()
    call_command("lag", stdout=text_out)
    assert f"held by flow control {held}" in text_out.getvalue()
    assert re.search(rf"acme\s+{key}\s+{reason}\s+{held}\b", text_out.getvalue())

    data = dashboard_build(now=db_now(), threshold_seconds=60)
    assert data.summary.worst_lag_seconds < 2.0
    assert data.summary.worst_shard is None
    assert data.summary.total_backlog == 0
    assert data.summary.total_held == held
    assert [(k.key, k.reason, k.jobs) for k in data.held_keys] == [(key, reason, held)]
    assert data.series.backlog[-1] == 0  # the history leaves the held jobs out too

    client.force_login(operator_make("viewer"))
    page = client.get("/admin/console/").content.decode()
    assert re.search(r'id="worst-lag">0\.\d s<', page)
    assert f'id="total-held">{held}<' in page
    assert f'<td class="key">{key}</td><td class="reason">{reason}</td>' in page

    text = _scrape(client, settings)
    assert max(_per_shard(text, "sendlater_shard_lag_seconds")) < 2.0
    assert sum(_per_shard(text, "sendlater_shard_due_backlog")) == 0
    assert max(_per_shard(text, "sendlater_shard_oldest_due_age_seconds")) == 0
    assert sum(_per_shard(text, "sendlater_shard_held_jobs")) == held
    assert max(_per_shard(text, "sendlater_shard_held_oldest_age_seconds")) >= 25


def test_a_rate_limited_key_behind_its_limit_is_held_not_lag(client, settings, team) -> None:
    flow_limits_set(team=team, key="partner", rate=2, period_seconds=1)
    ids = _due(team, 40, ago=26, key="partner")
    poller = poller_build()
    poller.iterate(now=db_now())  # reads the key: takes the slots within its horizon
    sent = Job.objects.filter(id__in=ids, status="delivered").count()
    assert 1 <= sent <= 8
    assert FlowControl.objects.get(key="partner").tat > db_now()  # drawing its rate
    # The pollers would go on drawing the key's slots while the checks below run (a few
    # seconds on a loaded machine): keep its schedule current for them.
    FlowControl.objects.filter(key="partner").update(tat=db_now() + timedelta(seconds=30))
    _assert_held_not_lag(client, settings, key="partner", reason="rate", held=40 - sent)


def test_a_paused_key_is_held_not_lag_while_other_jobs_still_lag(client, settings, team) -> None:
    flow_pause_set(team=team, key="paused-partner", paused=True)
    _due(team, 40, ago=30, key="paused-partner")
    _assert_held_not_lag(client, settings, key="paused-partner", reason="paused", held=40)

    plain = _due(team, 5, ago=30)  # no key: these wait on the pollers, and lag
    shards = set(Job.objects.filter(id__in=plain).values_list("shard", flat=True))
    report = shard_lag_report(now=db_now())
    lagging = {r.shard for r in report.rows if r.lag_seconds >= 29}
    assert lagging == shards
    assert sum(r.due_backlog for r in report.rows) == 5
    assert max(r.oldest_due_age_seconds or 0 for r in report.rows) >= 29
    assert sum(r.held for r in report.rows) == 40


def test_a_key_at_its_parallelism_is_held(team) -> None:
    flow, _ = flow_limits_set(team=team, key="slow", rate=None, period_seconds=1, parallelism=3)
    _due(team, 10, ago=30, key="slow")
    now = db_now()
    FlowSlot.objects.create(flow=flow, poller="p1", slots=3, expires_at=now + timedelta(60))
    report = shard_lag_report(now=now)
    assert [(k.key, k.reason, k.jobs) for k in report.held_keys] == [("slow", "parallelism", 10)]
    assert max(r.lag_seconds for r in report.rows) == 0
    # The slots of a poller gone (expired) count no more: nothing holds the key then.
    FlowSlot.objects.update(expires_at=now - timedelta(seconds=1))
    report = shard_lag_report(now=now)
    assert report.held_keys == []
    assert sum(r.due_backlog for r in report.rows) == 10
    assert max(r.lag_seconds for r in report.rows) >= 29


def test_a_rate_limited_key_no_poller_draws_is_lag(team) -> None:
    """A rate key whose slots stopped moving (no poller reads it) waits on the service."""
    flow, _ = flow_limits_set(team=team, key="stalled", rate=2, period_seconds=1)
    _due(team, 10, ago=30, key="stalled")
    now = db_now()
    FlowControl.objects.filter(pk=flow.pk).update(tat=now - timedelta(seconds=60))
    report = shard_lag_report(now=now)
    assert report.held_keys == []
    assert sum(r.due_backlog for r in report.rows) == 10
    assert max(r.lag_seconds for r in report.rows) >= 29
    FlowControl.objects.filter(pk=flow.pk).update(tat=now + timedelta(seconds=3))
    report = shard_lag_report(now=now)
    assert [(k.reason, k.jobs) for k in report.held_keys] == [("rate", 10)]
    assert max(r.lag_seconds for r in report.rows) == 0


def test_backlog_split_keeps_what_could_go_and_its_oldest() -> None:
    b0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    b1 = b0 + timedelta(minutes=1)
    rows = [(b0, 3, 10, b0 + timedelta(seconds=1)), (b1, 3, 4, b1 + timedelta(seconds=5))]
    held = [HeldGroup(b0, 3, 1, "k", 10, b0 + timedelta(seconds=1))]
    split = backlog_split(rows, held)[3]
    # bucket b0 holds only held jobs: the first that could go is b1's
    assert (split.depth, split.held, split.first_bucket) == (4, 10, b1)
    assert split.oldest == b1 + timedelta(seconds=5)
    assert split.held_oldest == b0 + timedelta(seconds=1)
    # A bucket with both, its oldest held: the others' oldest is taken as no earlier
    # than the bucket start (within the bucket's width of the truth).
    held = [HeldGroup(b1, 3, 1, "k", 2, b1 + timedelta(seconds=5))]
    split = backlog_split([(b1, 3, 4, b1 + timedelta(seconds=5))], held)[3]
    assert (split.depth, split.held, split.oldest) == (2, 2, b1 + timedelta(seconds=5))
    early = [HeldGroup(b1, 3, 1, "k", 2, b1 - timedelta(seconds=50))]  # written late
    split = backlog_split([(b1, 3, 4, b1 - timedelta(seconds=50))], early)[3]
    assert split.oldest == b1
    # The oldest is not held: it is exact.
    split = backlog_split([(b1, 3, 4, b1 - timedelta(seconds=50))], held)[3]
    assert split.oldest == b1 - timedelta(seconds=50)
