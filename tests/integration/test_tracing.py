"""Traces across the wait (both databases): a job keeps the trace context it was created
in, each delivery attempt sends a traceparent of its own span in that trace, and the
poller's reads and write-backs link to the jobs they carry (the SDK's in-memory exporter)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from polling.dispatch import spans
from polling.dispatch.base import ClaimedJob
from polling.dispatch.router import Router
from polling.dispatch.webhook import WebhookSink
from scheduling import tracing
from scheduling.jobs.requests import DeliveryRequest, request_stored
from scheduling.jobs.services import JobSpec, job_schedule, job_schedule_many
from scheduling.models import Job
from scheduling.schedules.services import ScheduleSpec, schedule_create
from tests.support.api import client_for, job_body
from tests.support.pollers import future_base, poller_build
from tests.support.receiver import running_receiver

pytestmark = pytest.mark.django_db

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture(autouse=True)
def _allow_loopback(settings):
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    settings.SENDLATER_BREAKER_FAILURES = 1000


@pytest.fixture
def exported():
    """Tracing on, every span kept in memory (exported as it ends)."""
    exporter = InMemorySpanExporter()
    tracing.install(tracing.provider_build(exporter, batch=False))
    yield exporter
    tracing.uninstall()


def named(exporter: InMemorySpanExporter, name: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def traceparent_of(request) -> tuple[str, str, str]:
    version, trace_id, span_id, flags = request.headers["traceparent"].split("-")
    assert version == "00"
    return trace_id, span_id, flags


def claimed(url: str, *, team_id: int = 1, attempt: int = 1, context: str | None) -> ClaimedJob:
    now = datetime.now(UTC)
    return ClaimedJob(
        id=uuid.uuid4(),
        team_id=team_id,
        due_at=now - timedelta(seconds=2),
        bucket=now.replace(second=0, microsecond=0),
        shard=3,
        attempt=attempt,
        target_kind="webhook",
        target=url,
        payload={},
        metadata={},
        expires_at=None,
        trace_context=context,
    )


def sink() -> WebhookSink:
    return WebhookSink(secrets_for=lambda ids: {i: [SECRET] for i in ids})


# --- the context kept at creation ---------------------------------------------------


def test_a_create_with_a_traceparent_leads_to_a_delivery_in_that_trace(team, exported) -> None:
    api = client_for(team)
    base = future_base()
    with running_receiver() as rx:
        response = api.post(
            "/api/v1/jobs",
            {"due_at": base.isoformat(), "callback_url": rx.url("/ok"), "payload": {}},
            format="json",
            HTTP_TRACEPARENT=TRACEPARENT,
            HTTP_TRACESTATE="rojo=00f067aa0ba902b7",
        )
        assert response.status_code == 201, response.content
        assert response["traceparent"] == TRACEPARENT
        assert response["tracestate"] == "rojo=00f067aa0ba902b7"
        job = Job.objects.get(id=response.json()["id"])
        assert job.trace_context == f"{TRACEPARENT} rojo=00f067aa0ba902b7"
        poller = poller_build(sink=Router({"webhook": sink()}))
        poller.iterate(now=base + timedelta(seconds=1))
        poller.stop()
    [request] = rx.requests
    trace_id, span_id, flags = traceparent_of(request)
    assert trace_id == TRACE and span_id != PARENT and flags == "01"
    assert request.headers["tracestate"] == "rojo=00f067aa0ba902b7"
    [span] = named(exported, "POST")
    context = span.get_span_context()
    assert f"{context.trace_id:032x}" == TRACE and f"{context.span_id:016x}" == span_id
    assert f"{span.parent.span_id:016x}" == PARENT and span.kind is SpanKind.CLIENT
    attributes = span.attributes
    assert attributes["sendlater.job.id"] == str(job.id)
    assert attributes["sendlater.job.attempt"] == 1
    assert attributes["http.request.method"] == "POST"
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["http.response.status_code"] == 200
    assert attributes["sendlater.outcome"] == "delivered"
    assert attributes["sendlater.lag_seconds"] >= 0
    # The poller's read and write-back: one span each, linked to the job's context.
    for name in ("sendlater.read", "sendlater.write_back"):
        [batch] = named(exported, name)
        assert [f"{link.context.trace_id:032x}" for link in batch.links] == [TRACE]
        assert batch.attributes["sendlater.jobs"] == 1


def test_a_create_without_a_context_gets_one_with_tracing_on(team, exported) -> None:
    response = client_for(team).post("/api/v1/jobs", job_body(), format="json")
    assert response.status_code == 201
    job = Job.objects.get(id=response.json()["id"])
    assert job.trace_context == response["traceparent"]
    [root] = named(exported, "sendlater.jobs.schedule")
    assert tracing.context_of(root.get_span_context()) == job.trace_context
    assert root.parent is None


def test_a_create_with_tracing_off_keeps_a_sent_context_and_makes_none(team) -> None:
    api = client_for(team)
    sent = api.post("/api/v1/jobs", job_body(), format="json", HTTP_TRACEPARENT=TRACEPARENT)
    plain = api.post("/api/v1/jobs", job_body(), format="json")
    bad = api.post("/api/v1/jobs", job_body(), format="json", HTTP_TRACEPARENT="00-zz-1-01")
    assert sent["traceparent"] == TRACEPARENT
    assert Job.objects.get(id=sent.json()["id"]).trace_context == TRACEPARENT
    for response in (plain, bad):  # an invalid traceparent is ignored (W3C)
        assert response.status_code == 201 and not response.has_header("traceparent")
        assert Job.objects.get(id=response.json()["id"]).trace_context is None


def test_a_bulk_create_keeps_the_requests_context_on_every_job(team) -> None:
    body = {"jobs": [job_body(), job_body(in_seconds=600)]}
    response = client_for(team).post(
        "/api/v1/jobs/bulk", body, format="json", HTTP_TRACEPARENT=TRACEPARENT
    )
    assert response.status_code == 201, response.content
    assert response["traceparent"] == TRACEPARENT
    ids = [item["id"] for item in response.json()["jobs"]]
    assert set(Job.objects.filter(id__in=ids).values_list("trace_context", flat=True)) == {
        TRACEPARENT
    }


def test_jobs_scheduled_inside_a_span_keep_that_span(team, exported) -> None:
    with tracing.TRACER.start_as_current_span("caller") as caller:
        [(job, _)] = job_schedule_many(
            team=team,
            specs=[JobSpec(due_at=future_base(), target_kind="handler", target="noop")],
        )
    assert job.trace_context == tracing.context_of(caller.get_span_context())


# --- delivery attempts ------------------------------------------------------------


def test_retries_are_sibling_spans_of_the_jobs_context(exported) -> None:
    context = TRACEPARENT
    with running_receiver() as rx:
        webhooks = sink()
        first = claimed(rx.url("/fail"), attempt=1, context=context)
        second = claimed(rx.url("/fail"), attempt=2, context=context)
        second.id = first.id
        webhooks.deliver([first])
        webhooks.deliver([second])
        webhooks.close()
    sent = [traceparent_of(r) for r in rx.requests]
    attempts = sorted(named(exported, "POST"), key=lambda s: s.attributes["sendlater.job.attempt"])
    assert [s.attributes["sendlater.job.attempt"] for s in attempts] == [1, 2]
    assert {f"{s.parent.span_id:016x}" for s in attempts} == {PARENT}  # siblings
    assert [f"{s.get_span_context().span_id:016x}" for s in attempts] == [s for _, s, _ in sent]
    assert len({s for _, s, _ in sent}) == 2 and {t for t, _, _ in sent} == {TRACE}
    for span in attempts:
        assert span.attributes["sendlater.outcome"] == "retry"
        assert span.attributes["http.response.status_code"] == 500
        assert span.attributes["error.type"] == "500"
        assert not span.status.is_ok


def test_no_context_leaks_between_the_jobs_of_one_batch(exported) -> None:
    other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with running_receiver() as rx:
        webhooks = sink()
        mine = claimed(rx.url("/ok"), team_id=1, context=TRACEPARENT)
        theirs = claimed(rx.url("/ok"), team_id=2, context=other)
        untraced = claimed(rx.url("/ok"), team_id=2, context=None)
        webhooks.deliver([mine, theirs, untraced])
        webhooks.close()
    by_id = {r.headers["webhook-id"]: r for r in rx.requests}
    assert traceparent_of(by_id[str(mine.id)])[0] == TRACE
    assert traceparent_of(by_id[str(theirs.id)])[0] == other[3:35]
    assert "traceparent" not in by_id[str(untraced.id)].headers
    assert "tracestate" not in by_id[str(theirs.id)].headers
    parents = {
        s.attributes["sendlater.job.id"]: f"{s.parent.span_id:016x}"
        for s in named(exported, "POST")
    }
    assert parents == {str(mine.id): PARENT, str(theirs.id): other[36:52]}


def test_a_shaped_request_sends_a_traceparent_unless_its_headers_set_one(exported) -> None:
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with running_receiver() as rx:
        webhooks = sink()
        shaped = claimed(rx.url("/ok"), context=TRACEPARENT)
        shaped.request = request_stored(DeliveryRequest(method="PUT", headers={"X-Key": "v"}))
        theirs = claimed(rx.url("/ok"), context=TRACEPARENT)
        theirs.request = request_stored(DeliveryRequest(headers={"traceparent": own}))
        webhooks.deliver([shaped, theirs])
        webhooks.close()
    by_id = {r.headers["webhook-id"]: r for r in rx.requests}
    assert traceparent_of(by_id[str(shaped.id)])[0] == TRACE
    assert by_id[str(shaped.id)].headers["x-key"] == "v"
    assert by_id[str(theirs.id)].headers["traceparent"] == own  # theirs, not ours after it
    [span] = named(exported, "PUT")
    assert span.attributes["sendlater.job.id"] == str(shaped.id)
    assert span.attributes["http.request.method"] == "PUT"
    assert not named(exported, "POST")  # the job that sent its own: no span of ours


def test_with_tracing_off_no_traceparent_is_sent() -> None:
    with running_receiver() as rx:
        webhooks = sink()
        webhooks.deliver([claimed(rx.url("/ok"), context=TRACEPARENT)])
        webhooks.close()
    [request] = rx.requests
    assert "traceparent" not in request.headers


def test_batch_spans_link_a_capped_number_of_jobs_and_count_all(exported, monkeypatch) -> None:
    monkeypatch.setattr(spans, "LINKS_MAX", 2)
    jobs = [claimed("http://127.0.0.1/ok", context=TRACEPARENT) for _ in range(3)]
    jobs.append(claimed("http://127.0.0.1/ok", context=None))
    spans.batch_close(spans.batch_open("sendlater.write_back", owner="p1"), jobs[:2], jobs[2:])
    [batch] = named(exported, "sendlater.write_back")
    assert len(batch.links) == 2 and batch.attributes["sendlater.owner"] == "p1"
    assert batch.attributes["sendlater.jobs"] == 4 and batch.attributes["sendlater.links"] == 2
    assert {link.attributes["sendlater.job.id"] for link in batch.links} == {
        str(jobs[0].id),
        str(jobs[1].id),
    }


def test_a_poller_reads_each_shard_in_one_span_linked_to_its_jobs(team, exported) -> None:
    base = future_base()
    for n in range(3):
        job_schedule(
            team=team,
            due_at=base + timedelta(seconds=n),
            target_kind="handler",
            target="noop",
            trace_context=TRACEPARENT,
            now=base,
        )
    poller = poller_build()
    poller.iterate(now=base + timedelta(seconds=5))
    poller.stop()
    reads = named(exported, "sendlater.read")
    assert sum(read.attributes["sendlater.jobs"] for read in reads) == 3
    assert sum(len(read.links) for read in reads) == 3
    assert all(read.attributes["sendlater.owner"] == "p1" for read in reads)


# --- schedules ----------------------------------------------------------------------


def test_each_occurrence_starts_its_own_trace_linked_to_the_schedule(team, exported) -> None:
    base = future_base()
    spec = ScheduleSpec(
        target_kind="handler", target="noop", every_seconds=60, trace_context=TRACEPARENT
    )
    schedule = schedule_create(team=team, spec=spec, now=base)
    assert schedule.trace_context == TRACEPARENT
    poller = poller_build()
    poller.iterate(now=base)  # plans the occurrences ahead
    poller.stop()
    occurrences = list(Job.objects.filter(schedule_id=schedule.id).order_by("scheduled_for"))
    assert len(occurrences) >= 2
    traces = {tracing.trace_id_of(job.trace_context) for job in occurrences}
    assert len(traces) == len(occurrences) and TRACE not in traces  # one trace each
    roots = {
        tracing.context_of(s.get_span_context()): s
        for s in named(exported, "sendlater.schedule.occurrence")
    }
    for job in occurrences:
        root = roots[job.trace_context]
        assert root.parent is None
        [link] = root.links
        assert f"{link.context.trace_id:032x}" == TRACE
        assert f"{link.context.span_id:016x}" == PARENT
        assert root.attributes["sendlater.schedule.id"] == str(schedule.id)


def test_a_schedule_created_over_the_api_keeps_the_requests_context(team) -> None:
    response = client_for(team).post(
        "/api/v1/schedules",
        {"every_seconds": 60, "handler": "noop"},
        format="json",
        HTTP_TRACEPARENT=TRACEPARENT,
    )
    assert response.status_code == 201, response.content
    assert response["traceparent"] == TRACEPARENT


def test_a_handlers_own_spans_join_the_jobs_trace(exported, monkeypatch) -> None:
    from polling.dispatch.handlers import HandlerSink
    from scheduling import handlers

    def traced_handler(delivery) -> None:
        with tracing.TRACER.start_as_current_span("inside the handler") as span:
            span.set_attribute("handler.job", str(delivery.job_id))

    monkeypatch.setitem(handlers._registry, "tracing_test_handler", traced_handler)

    job = claimed("", context=TRACEPARENT)
    job.target_kind, job.target = "handler", "tracing_test_handler"
    handlers_sink = HandlerSink(concurrency=2)
    [outcome] = handlers_sink.deliver([job])
    handlers_sink.close()
    assert outcome.result == "delivered"
    [attempt] = named(exported, "handler tracing_test_handler")
    [inner] = named(exported, "inside the handler")
    assert f"{attempt.parent.span_id:016x}" == PARENT
    assert inner.parent.span_id == attempt.context.span_id
    assert attempt.attributes["sendlater.outcome"] == "delivered"
