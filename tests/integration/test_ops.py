"""Health probes, /metrics, the capacity planner command and JSON logs."""

from __future__ import annotations

import json
import logging
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from sendlater_site.logformat import JsonFormatter


@pytest.mark.django_db
def test_healthz_and_readyz(client: Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "migrations": "ok"}


@pytest.mark.django_db
def test_readyz_reports_unapplied_migrations(client: Client, monkeypatch) -> None:
    from django.db.migrations.executor import MigrationExecutor

    real = MigrationExecutor.migration_plan

    def pending(self, targets, clean_start=False):
        plan = real(self, [("scheduling", "0001_initial")], clean_start)
        return plan or [
            (self.loader.graph.nodes[("scheduling", "0002_seed_shard_count_schedule")], False)
        ]

    monkeypatch.setattr(MigrationExecutor, "migration_plan", pending)
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert "unapplied" in ready.json()["checks"]["migrations"]


@pytest.mark.django_db
def test_metrics_needs_the_token(client: Client, settings) -> None:
    settings.SENDLATER_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    settings.SENDLATER_METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 404
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret")
    assert response.status_code == 200
    assert b"sendlater_jobs_scheduled_total" in response.content


def plan(*args: str) -> str:
    out = StringIO()
    call_command("plan_capacity", *args, stdout=out)
    return out.getvalue()


def test_planner_prints_the_design_example() -> None:
    text = plan(
        "--peak-per-minute",
        "1000000",
        "--shards",
        "100",
        "--pollers",
        "10",
        "--bucket-seconds",
        "60",
    )
    assert "jobs per partition per bucket: 10,000" in text
    assert "drain rate per partition: about 167 jobs/s" in text
    assert "rate per poller: about 1,667 jobs/s" in text
    assert "warnings: none" in text
    assert "recommendation: S = " in text


def test_planner_warns() -> None:
    text = plan(
        "--peak-per-minute",
        "1000000",
        "--shards",
        "4",
        "--pollers",
        "10",
        "--poller-capacity",
        "2000",
    )
    assert "6 will be standbys" in text
    assert "above the measured single-poller capacity of 2,000 jobs/s" in text
    assert "large for a 60 s bucket" in text


def test_planner_rejects_bad_numbers() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="whole number"):
        plan("--peak-per-minute", "lots", "--shards", "4", "--pollers", "1")
    with pytest.raises(CommandError, match="at least 1"):
        plan("--peak-per-minute", "10", "--shards", "0", "--pollers", "1")


def test_json_log_lines_carry_context() -> None:
    record = logging.LogRecord("polling", logging.INFO, __file__, 1, "claimed %s rows", (17,), None)
    record.poller = "host-1"
    record.shard = 5
    record.bucket = "2027-03-01T09:00:00+00:00"
    record.job_id = "b5e0a6e2-0000-4000-8000-000000000000"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "claimed 17 rows"
    assert line["poller"] == "host-1" and line["shard"] == 5
    assert line["bucket"].startswith("2027-03-01") and line["job_id"].startswith("b5e0")
    assert line["level"] == "INFO" and line["logger"] == "polling"
