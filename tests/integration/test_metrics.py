"""Metrics after a burst: delivery outcomes, latency, batches, leases, per-shard lag."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client

from scheduling.jobs.services import job_schedule_many
from scheduling.sharding.clock import db_now
from tests.support.factories import job_spec
from tests.support.pollers import RecordingSink, future_base, poller_build

pytestmark = pytest.mark.django_db


def scrape(client: Client) -> str:
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer t0ken")
    assert response.status_code == 200
    return response.content.decode()


def value(text: str, name: str, labels: str = "") -> float:
    pattern = (
        re.escape(name) + (re.escape("{" + labels + "}") if labels else r"(?:\{\})?") + r" (\S+)"
    )
    match = re.search("^" + pattern + "$", text, re.M)
    assert match, f"{name}{{{labels}}} not in metrics"
    return float(match.group(1))


def test_metrics_after_a_burst(
    client: Client, settings, team, django_capture_on_commit_callbacks
) -> None:
    settings.SENDLATER_METRICS_TOKEN = "t0ken"
    before = scrape(client)
    delivered0 = (
        value(before, "sendlater_deliveries_total", 'result="delivered"')
        if 'result="delivered"' in before
        else 0.0
    )
    base = future_base()
    sink = RecordingSink()
    with django_capture_on_commit_callbacks(execute=True):
        specs = [job_spec(due_at=base + timedelta(seconds=i % 30)) for i in range(300)]
        jobs = [j for j, _ in job_schedule_many(team=team, specs=specs, now=base)]
    failing = {jobs[0].id, jobs[1].id}
    sink.fail = failing
    poller = poller_build(sink=sink, batch_size=50)
    now = base + timedelta(seconds=40)
    for _ in range(20):
        if not poller.iterate(now=now):
            break
    # A backlog left on purpose: jobs due a minute ago (by the database clock), not polled.
    job_schedule_many(
        team=team, specs=[job_spec(due_at=db_now() - timedelta(minutes=1)) for _ in range(7)]
    )

    text = scrape(client)
    assert value(text, "sendlater_deliveries_total", 'result="delivered"') - delivered0 == 298
    assert value(text, "sendlater_deliveries_total", 'result="retry"') >= 2
    assert value(text, "sendlater_delivery_latency_seconds_count") >= 298
    assert value(text, "sendlater_delivery_latency_seconds_bucket", 'le="60.0"') >= 298
    assert value(text, "sendlater_claim_batch_size_count") >= 6
    assert value(text, "sendlater_lease_acquisitions_total") >= 64
    assert value(text, "sendlater_jobs_scheduled_total", 'target_kind="handler"') >= 300
    backlog = sum(
        float(v)
        for v in re.findall(r'^sendlater_shard_due_backlog\{shard="\d+"\} (\S+)$', text, re.M)
    )
    assert backlog == 7
    oldest = [
        float(v)
        for v in re.findall(
            r'^sendlater_shard_oldest_due_age_seconds\{shard="\d+"\} (\S+)$', text, re.M
        )
    ]
    assert max(oldest) >= 59
    shards = re.findall(r'^sendlater_shard_lag_seconds\{shard="(\d+)"\}', text, re.M)
    assert sorted(int(s) for s in shards) == list(range(64))
    # Bounded labels: no job ids or URLs anywhere.
    assert str(jobs[0].id) not in text
