"""Flow-control gauges on /metrics: the top keys by waiting, the rest summed, few reads."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from scheduling.flow.metrics import FlowControlCollector
from scheduling.sharding.clock import db_now
from tests.support.flows import flow_make, flows_bulk

pytestmark = pytest.mark.django_db
FAMILIES = (
    "sendlater_flow_waiting_jobs",
    "sendlater_flow_in_flight_jobs",
    "sendlater_flow_paused",
    "sendlater_flow_period_deliveries",
)


def scrape(client: Client) -> str:
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer t0ken")
    assert response.status_code == 200
    return response.content.decode()


def series(text: str, name: str) -> dict[tuple[str, str], float]:
    pattern = "^" + re.escape(name) + r'\{key="([^"]*)",team="([^"]*)"\} (\S+)$'
    return {(team, key): float(v) for key, team, v in re.findall(pattern, text, re.M)}


@pytest.fixture
def token(settings) -> None:
    settings.SENDLATER_METRICS_TOKEN = "t0ken"


def test_top_keys_by_waiting_and_the_rest_summed(client, token, settings, team, other_team) -> None:
    settings.SENDLATER_METRICS_FLOW_KEYS = 2
    now = db_now()
    flow_make(team, "a", now=now, rate=100, period_seconds=60, waiting=5, in_flight=1, delivered=40)
    flow_make(other_team, "a", now=now, rate=10, waiting=4, paused=True)
    flow_make(team, "b", now=now, rate=10, period_seconds=60, waiting=3, in_flight=2, delivered=7)
    flow_make(team, "c", now=now, rate=10, waiting=1, paused=True)
    flow_make(other_team, "d", now=now, parallelism=1, paused=True)
    text = scrape(client)
    waiting = series(text, "sendlater_flow_waiting_jobs")
    assert waiting == {("acme", "a"): 5, ("globex", "a"): 4, ("", "_other"): 4}
    assert series(text, "sendlater_flow_in_flight_jobs") == {
        ("acme", "a"): 1,
        ("globex", "a"): 0,
        ("", "_other"): 2,
    }
    assert series(text, "sendlater_flow_paused") == {
        ("acme", "a"): 0,
        ("globex", "a"): 1,
        ("", "_other"): 2,  # paused keys among the rest
    }
    assert series(text, "sendlater_flow_period_deliveries") == {
        ("acme", "a"): 40,
        ("globex", "a"): 0,
        ("", "_other"): 7,
    }
    assert re.search(r"^sendlater_flow_keys 5\.0$", text, re.M)


def test_series_stay_bounded_and_one_scrape_costs_a_few_reads(
    client, token, settings, team
) -> None:
    settings.SENDLATER_METRICS_FLOW_KEYS = 20
    now = db_now()
    flow_make(team, "hot", now=now, rate=10, waiting=2)
    collector = FlowControlCollector()
    with CaptureQueriesContext(connection) as few:
        list(collector.collect())
    flows_bulk(team, 300, now=now)
    with CaptureQueriesContext(connection) as many:
        list(collector.collect())
    assert len(many.captured_queries) == len(few.captured_queries) <= 4
    text = scrape(client)
    for name in FAMILIES:
        found = series(text, name)
        assert len(found) == 20 + 1, name
        assert ("", "_other") in found
    assert series(text, "sendlater_flow_waiting_jobs")[("acme", "hot")] == 2
    assert re.search(r"^sendlater_flow_keys 301\.0$", text, re.M)


def test_no_keys_and_no_per_key_series(client, token, settings, team) -> None:
    text = scrape(client)
    assert series(text, "sendlater_flow_waiting_jobs") == {("", "_other"): 0}
    assert re.search(r"^sendlater_flow_keys 0\.0$", text, re.M)
    settings.SENDLATER_METRICS_FLOW_KEYS = 0
    flow_make(team, "a", now=db_now(), rate=1, waiting=3)
    assert series(scrape(client), "sendlater_flow_waiting_jobs") == {("", "_other"): 3}
