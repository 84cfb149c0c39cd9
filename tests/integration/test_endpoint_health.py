"""Topic endpoints' health (issue 32): an endpoint whose deliveries all fail for too long
is disabled and its team told; a burst clears a healthy endpoint once a second; topic
deliveries are counted by topic with bounded labels."""

from __future__ import annotations

import pytest

from polling.dispatch.router import Router
from polling.dispatch.webhook import WebhookSink
from scheduling.jobs.requests import RetryPolicy
from scheduling.topics.services import EndpointSpec, topic_put
from tests.support.pollers import future_base, poller_build
from tests.support.receiver import running_receiver
from tests.support.topics import by_endpoint, children_of, run, topic_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    settings.SENDLATER_BREAKER_FAILURES = 1000


def test_an_endpoint_failing_for_too_long_is_disabled_and_the_team_is_told(team, settings) -> None:
    from scheduling.jobs.team_defaults import team_defaults_set
    from scheduling.models import TopicEndpoint

    settings.SENDLATER_TOPIC_DISABLE_AFTER_SECONDS = 60
    base = future_base()
    with running_receiver() as rx:
        team_defaults_set(team=team, default_on_failure_url=rx.url("/ok?e=told"))
        topic_put(
            team=team,
            name="orders",
            endpoints=[
                EndpointSpec(name="good", url=rx.url("/ok?e=good")),
                EndpointSpec(name="bad", url=rx.url("/fail?e=bad")),
            ],
        )
        job = topic_job(team, base, retry=RetryPolicy(max_attempts=10, min_backoff_seconds=30))
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        run(poller, base, [1, 2])  # fanned out; bad fails once: failing since then
        bad = TopicEndpoint.objects.get(name="bad")
        assert bad.state == "enabled" and bad.failing_since is not None
        assert TopicEndpoint.objects.get(name="good").failing_since is None
        run(poller, base, [40, 41, 100, 101, 200, 201])  # still failing past a minute
        bad.refresh_from_db()
        assert bad.state == "disabled" and "every delivery failed" in bad.disabled_reason
        tries = len(by_endpoint(rx)["bad"])
        run(poller, base, [400, 401, 402, 600, 601, 602])  # its delivery waits now
        sink.close()
    got = by_endpoint(rx)
    assert len(got["bad"]) == tries and len(got["good"]) == 1
    (told,) = got["told"]
    event = told.json()
    assert event["type"] == "endpoint.disabled"
    assert (event["topic"], event["endpoint"]) == ("orders", "bad")
    assert children_of(job)["bad"].status == "pending"


def test_topic_deliveries_are_counted_by_topic_with_bounded_labels(team, settings) -> None:
    from polling import metrics
    from polling.writing import endpoint_health

    settings.SENDLATER_METRICS_FLOW_KEYS = 1
    endpoint_health._LABELLED.clear()
    base = future_base()

    def count(topic: str, result: str, team_label: str | None = None) -> float:
        labels = (str(team.pk) if team_label is None else team_label, topic, result)
        return metrics.TOPIC_DELIVERIES.labels(*labels)._value.get()

    def labelled() -> float:
        return count("first", "delivered") + count("second", "delivered")

    before = labelled(), count("_other", "delivered", "")
    with running_receiver() as rx:
        for name in ("first", "second"):
            topic_put(
                team=team,
                name=name,
                endpoints=[EndpointSpec(name=n, url=rx.url(f"/ok?e={n}")) for n in ("a", "b")],
            )
            topic_job(team, base, topic=name)
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        run(poller, base, [1, 2, 3])
        sink.close()
    # One topic has series of its own (the first met); the other counts as _other.
    assert labelled() - before[0] == 2
    assert count("_other", "delivered", "") - before[1] == 2


def test_a_burst_to_a_healthy_endpoint_clears_it_once_a_second_and_after_a_failure_at_once(
    team, django_assert_num_queries
) -> None:
    from uuid import uuid4

    from polling.dispatch.base import ClaimedJob
    from polling.writing.endpoint_health import endpoints_health
    from polling.writing.writeback import Result
    from scheduling.models import TopicEndpoint

    topic_put(team=team, name="orders", endpoints=[EndpointSpec(name="a", url="http://x.test/")])
    now = future_base()
    request = {"topic": "orders", "endpoint": "a", "topic_of": str(uuid4())}

    def group(status: str, n: int = 3) -> int:
        jobs = [
            ClaimedJob(uuid4(), team.id, now, now, 0, 1, "webhook", "http://x.test/", {}, {}, None)
            for _ in range(n)
        ]
        for job in jobs:
            job.request = request
        results = [Result(j.id, status, now, now, 0) for j in jobs]
        return endpoints_health(jobs=jobs, results=results, written={j.id for j in jobs}, now=now)

    endpoint = TopicEndpoint.objects.get(name="a")
    with django_assert_num_queries(1):
        group("delivered")  # the first delivery clears (one UPDATE)
    with django_assert_num_queries(0):
        group("delivered")  # the next ones within the second write nothing
    with django_assert_num_queries(2):  # set failing_since, look for the long failing
        group("pending")
    endpoint.refresh_from_db()
    assert endpoint.failing_since == now and endpoint.state == "enabled"
    with django_assert_num_queries(1):
        group("delivered")  # after a failure it recorded: at once
    endpoint.refresh_from_db()
    assert endpoint.failing_since is None
