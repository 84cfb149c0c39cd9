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
from scheduling.jobs.services import job_cancel, job_reschedule
from scheduling.models import Job
from scheduling.topics.services import EndpointSpec, endpoint_state_set, topic_put
from tests.integration.test_delivery_request import verified
from tests.support.pollers import future_base, poller_build
from tests.support.receiver import running_receiver
from tests.support.topics import by_endpoint, children_of, run, topic_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    settings.SENDLATER_BREAKER_FAILURES = 1000


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


def test_a_parent_fenced_out_of_its_write_gets_no_child_and_names_none(team) -> None:
    """Two topic jobs written in one group, one read under an epoch that is no longer
    its shard's: that one stays pending, unnamed, with no child; the other is fanned
    out and names exactly the children written."""
    from django.db import transaction

    from polling.dispatch.base import ClaimedJob
    from polling.writing.fanout import fanout_plan, fanout_write
    from polling.writing.writeback import Result, write_back

    base = future_base()
    topic_put(
        team=team,
        name="orders",
        endpoints=[EndpointSpec(name=n, url=f"http://127.0.0.1:9/{n}") for n in ("a", "b", "c")],
    )
    poller = poller_build("p1")
    poller.iterate(now=base - timedelta(seconds=2))  # it takes every shard's lease
    kept, fenced = topic_job(team, base), topic_job(team, base)
    now = base + timedelta(seconds=1)
    epochs = dict(poller.leases)
    jobs = [
        ClaimedJob(
            job.id, team.pk, job.due_at, job.bucket, job.shard, 1, "topic", "orders",
            job.payload, job.metadata, None, epoch=epochs[job.shard] + (job is fenced),
        )
        for job in (kept, fenced)
    ]  # fmt: skip
    results = [Result(j.id, "delivered", j.due_at, j.bucket, j.shard, epoch=j.epoch) for j in jobs]
    before = Job.objects.count()
    with transaction.atomic():
        plan = fanout_plan(jobs=jobs, results=results, now=now)
        assert plan is not None and {r.status for r in results} == {"fanned_out"}
        written = write_back(owner="p1", results=results, now=now)
        assert written == {kept.id}
        assert fanout_write(plan, written=written, now=now) == 3
    assert Job.objects.count() == before + 3  # the kept parent's three, no more
    fenced.refresh_from_db()
    assert fenced.status == "pending" and "children" not in (fenced.request or {})
    assert children_of(fenced) == {}
    children = children_of(kept)
    assert kept.status == "fanned_out" and set(children) == {"a", "b", "c"}
    assert {c.status for c in children.values()} == {"pending"}
    assert {c.request["topic_of"] for c in children.values()} == {str(kept.id)}
