"""Topics (issue 32): a job naming a topic is fanned out at its due time, one child job
per endpoint enabled then, each delivered, retried and dead-lettered on its own."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from polling.dispatch.router import Router
from polling.dispatch.webhook import WebhookSink
from scheduling.api.jobs.bodies import job_body
from scheduling.jobs.requests import DeliveryRequest, RetryPolicy
from scheduling.jobs.services import job_cancel, job_reschedule, job_schedule
from scheduling.models import Job
from scheduling.topics.services import EndpointSpec, endpoint_state_set, topic_put
from tests.integration.test_delivery_request import verified
from tests.support.pollers import future_base, poller_build
from tests.support.receiver import running_receiver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    settings.SENDLATER_BREAKER_FAILURES = 1000


def topic_job(team, due, *, topic="orders", **request):
    job, _ = job_schedule(
        team=team,
        due_at=due,
        target_kind="topic",
        target=topic,
        payload={"order": 42},
        metadata={"order": "o-42"},
        request=DeliveryRequest(**request) if request else None,
        now=due - timedelta(minutes=1),
    )
    return job


def children_of(job) -> dict[str, Job]:
    job.refresh_from_db()
    named = (job.request or {}).get("children", {})
    return {name: Job.objects.get(id=child) for name, child in named.items()}


def by_endpoint(rx) -> dict[str, list]:
    out: dict[str, list] = {}
    for received in rx.requests:
        out.setdefault(received.path.split("e=")[-1], []).append(received)
    return out


def run(poller, base, seconds):
    for step in seconds:
        poller.iterate(now=base + timedelta(seconds=step))


def test_each_endpoint_gets_its_own_delivery_and_one_failing_touches_no_other(team) -> None:
    base = future_base()
    with running_receiver() as rx:
        topic_put(
            team=team,
            name="orders",
            endpoints=[
                EndpointSpec(name="billing", url=rx.url("/ok?e=billing")),
                EndpointSpec(
                    name="crm",
                    url=rx.url("/ok?e=crm"),
                    request=DeliveryRequest(headers={"Authorization": "Bearer crm"}),
                ),
                EndpointSpec(name="warehouse", url=rx.url("/fail?e=warehouse")),
            ],
        )
        job = topic_job(team, base, retry=RetryPolicy(max_attempts=2, min_backoff_seconds=1))
        sink = Router({"webhook": WebhookSink(concurrency=4)})
        poller = poller_build(sink=sink)
        run(poller, base, [1])  # the fan-out: three children, due now
        children = children_of(job)
        assert job.status == "fanned_out" and set(children) == {"billing", "crm", "warehouse"}
        assert all(c.status == "pending" and c.target_kind == "webhook" for c in children.values())
        run(poller, base, [2, 3])  # delivered, delivered, a retry
        body = job_body(job)
        assert body["status"] == "fanned_out" and body["topic"] == "orders"
        states = {d["endpoint"]: (d["status"], d["attempts"]) for d in body["deliveries"]}
        assert states == {
            "billing": ("delivered", 1),
            "crm": ("delivered", 1),
            "warehouse": ("pending", 1),
        }
        run(poller, base, [30, 60, 120])  # the warehouse's second try: dead
        sink.close()
    children = children_of(job)
    assert children["warehouse"].status == "dead" and children["warehouse"].attempts == 2
    got = by_endpoint(rx)
    # One delivery each to the healthy endpoints, however often the other failed.
    assert len(got["billing"]) == 1 and len(got["crm"]) == 1 and len(got["warehouse"]) == 2
    assert got["crm"][0].headers["authorization"] == "Bearer crm"
    assert "authorization" not in got["billing"][0].headers
    for name, received in got.items():
        verified(team, received[0])
        envelope = received[0].json()
        assert envelope["payload"] == {"order": 42}
        assert envelope["id"] == str(children[name].id)  # each its own job, its own id
    body = job_body(job)
    assert body["status"] == "fanned_out"
    assert {d["endpoint"]: d["status"] for d in body["deliveries"]}["warehouse"] == "dead"


def test_the_job_reads_delivered_once_every_endpoint_is(team) -> None:
    base = future_base()
    with running_receiver() as rx:
        topic_put(
            team=team,
            name="orders",
            endpoints=[EndpointSpec(name=n, url=rx.url(f"/ok?e={n}")) for n in ("a", "b")],
        )
        job = topic_job(team, base)
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        run(poller, base, [1, 2, 3])
        sink.close()
    job.refresh_from_db()
    assert job.status == "fanned_out" and job.delivered_at is not None
    assert job_body(job)["status"] == "delivered"
    assert sorted(by_endpoint(rx)) == ["a", "b"]


def test_a_disabled_endpoint_is_left_out_and_its_waiting_deliveries_wait(team) -> None:
    base = future_base()
    with running_receiver() as rx:
        topic_put(
            team=team,
            name="orders",
            endpoints=[EndpointSpec(name=n, url=rx.url(f"/ok?e={n}")) for n in ("a", "b", "c")],
        )
        endpoint_state_set(team=team, topic="orders", name="c", enabled=False, reason="down")
        first = topic_job(team, base)
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        run(poller, base, [1])  # fanned out to a and b only
        assert set(children_of(first)) == {"a", "b"}
        # Disabled after the fan-out: its delivery is written and waits (a held key).
        endpoint_state_set(team=team, topic="orders", name="b", enabled=False)
        run(poller, base, [2, 3, 4])
        waiting = children_of(first)["b"]
        assert waiting.status == "pending" and waiting.attempts == 0
        assert waiting.flow_control_key == "topic:orders:b"
        assert sorted(by_endpoint(rx)) == ["a"]
        endpoint_state_set(team=team, topic="orders", name="b", enabled=True)
        run(poller, base, [5, 6, 7])
        sink.close()
    assert children_of(first)["b"].status == "delivered"
    assert sorted(by_endpoint(rx)) == ["a", "b"]


def test_cancel_and_reschedule_act_on_the_pending_topic_job_as_one(team) -> None:
    base = future_base()
    with running_receiver() as rx:
        topic_put(
            team=team,
            name="orders",
            endpoints=[EndpointSpec(name=n, url=rx.url(f"/ok?e={n}")) for n in ("a", "b")],
        )
        canceled = topic_job(team, base)
        moved = topic_job(team, base)
        job_cancel(team=team, job_id=canceled.id, now=base - timedelta(seconds=30))
        job_reschedule(team=team, job_id=moved.id, due_at=base + timedelta(minutes=5), now=base)
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        run(poller, base, [1, 2])
        assert rx.requests == []
        canceled.refresh_from_db(), moved.refresh_from_db()
        assert canceled.status == "canceled" and moved.status == "pending"
        run(poller, base, [301, 302, 303])
        sink.close()
    assert children_of(canceled) == {}
    assert {c.status for c in children_of(moved).values()} == {"delivered"}
    assert sorted(by_endpoint(rx)) == ["a", "b"]


def test_a_job_whose_topic_is_gone_ends_dead_and_its_failure_callback_hears_it(team) -> None:
    base = future_base()
    with running_receiver() as rx:
        job = topic_job(team, base, topic="nobody", on_failure_url=rx.url("/ok?e=told"))
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        run(poller, base, [1, 2, 3])
        sink.close()
    job.refresh_from_db()
    assert job.status == "dead" and "does not exist" in job.last_error
    (told,) = by_endpoint(rx)["told"]
    assert told.json()["type"] == "job.dead"


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


def test_a_schedule_naming_a_topic_fans_each_occurrence_out(team, settings) -> None:
    from scheduling.schedules.services import ScheduleSpec, schedule_create

    settings.SENDLATER_SCHEDULE_AHEAD_SECONDS = 120
    base = future_base()
    with running_receiver() as rx:
        topic_put(
            team=team,
            name="orders",
            endpoints=[EndpointSpec(name=n, url=rx.url(f"/ok?e={n}")) for n in ("a", "b")],
        )
        spec = ScheduleSpec(target_kind="topic", target="orders", every_seconds=60, start_at=base)
        schedule = schedule_create(team=team, spec=spec, now=base)
        sink = Router({"webhook": WebhookSink(concurrency=2)})
        poller = poller_build(sink=sink)
        run(poller, base, [0, 1, 2, 3, 61, 62, 63])
        sink.close()
    occurrences = Job.objects.filter(schedule_id=schedule.id, status="fanned_out")
    assert occurrences.count() == 2
    got = by_endpoint(rx)
    assert len(got["a"]) == 2 and len(got["b"]) == 2


def test_each_childs_request_is_its_parents_under_its_endpoints_and_names_its_parent(
    team,
) -> None:
    from scheduling.models import Team, TopicEndpoint

    base = future_base()
    other = Team.objects.create(slug="other-team", name="Other")
    for owner, timeout in ((team, 7), (other, 9)):  # the same names, each team its own
        topic_put(
            team=owner,
            name="orders",
            endpoints=[
                EndpointSpec(name="billing", url="http://127.0.0.1:9/b"),
                EndpointSpec(
                    name="crm",
                    url="http://127.0.0.1:9/c",
                    request=DeliveryRequest(format="payload", timeout_seconds=timeout),
                ),
            ],
        )
    parents = [
        topic_job(team, base),
        topic_job(team, base),
        topic_job(team, base, timeout_seconds=3, headers={"X-Shape": "1"}),
        topic_job(other, base, timeout_seconds=3, headers={"X-Shape": "1"}),
    ]
    poller = poller_build()
    run(poller, base, [1])  # the fan-out (the children wait for the next pass)
    for parent in parents:
        children = children_of(parent)
        assert set(children) == {"billing", "crm"}
        inherited = {k: v for k, v in parent.request.items() if k not in ("callbacks", "children")}
        for name, child in children.items():
            endpoint = TopicEndpoint.objects.get(topic__team=parent.team, name=name)
            assert child.request == {
                **inherited,
                **(endpoint.request or {}),
                "topic_of": str(parent.id),
                "topic": "orders",
                "endpoint": name,
            }
    crm_timeouts = {children_of(p)["crm"].request["timeout_seconds"] for p in parents}
    assert crm_timeouts == {7, 9}  # the endpoint's own setting, per team


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


def test_children_go_to_the_shards_of_the_poller_that_fans_them_out(team) -> None:
    from polling.models import ShardLease

    base = future_base()
    with running_receiver() as rx:
        topic_put(
            team=team,
            name="orders",
            endpoints=[EndpointSpec(name=f"e{k}", url=rx.url(f"/ok?e=e{k}")) for k in range(4)],
        )
        sinks = [Router({"webhook": WebhookSink(concurrency=4)}) for _ in range(2)]
        pollers = [poller_build(f"p{k + 1}", sink=sink) for k, sink in enumerate(sinks)]
        for step in range(-30, 0):  # the two split the shards between them
            for poller in pollers:
                poller.iterate(now=base + timedelta(seconds=step))
        owner = dict(ShardLease.objects.values_list("shard", "owner"))
        assert set(owner.values()) == {"p1", "p2"}
        jobs = [topic_job(team, base) for _ in range(40)]
        parents = [job.id for job in jobs]
        for step in range(1, 61):  # until every child is delivered (a loaded CI needs more)
            for poller in pollers:
                poller.iterate(now=base + timedelta(seconds=step))
            delivered = Job.objects.filter(team=team, status="delivered").exclude(id__in=parents)
            if delivered.count() == 160:
                break
        for sink in sinks:
            sink.close()
    received = Counter(r.headers["webhook-id"] for r in rx.requests)
    fanned = {owner[job.shard] for job in jobs}
    sent_to = set()
    assert fanned == {"p1", "p2"}  # both pollers fanned out parents of their own shards
    for job in jobs:
        children = children_of(job)
        assert len(children) == 4
        # each child on a shard its parent's poller holds, delivered
        assert {owner[child.shard] for child in children.values()} == {owner[job.shard]}
        assert {child.status for child in children.values()} == {"delivered"}
        # ... and sent once an attempt: read by one poller only (a request that timed
        # out on a loaded machine is a real retry, sent again).
        for child in children.values():
            assert received[str(child.id)] == child.attempts
            sent_to.add(str(child.id))
    assert set(received) == sent_to  # nothing else was sent
