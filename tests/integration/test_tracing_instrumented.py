"""Tracing as a deployment turns it on (``tracing.install_from_env``): the Django and
psycopg instrumentations around the API, on a new database connection (both databases)."""

from __future__ import annotations

import pytest
from django.db import connection
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from scheduling import tracing
from scheduling.models import Job
from tests.support.api import client_for, job_body

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


@pytest.fixture
def instrumented():
    exporter = InMemorySpanExporter()
    tracing.install(tracing.provider_build(exporter, batch=False))
    tracing._instrument_libraries()
    _reconnect()  # the next statement opens an instrumented connection
    try:
        yield exporter
    finally:
        _reconnect()
        DjangoInstrumentor().uninstrument()
        PsycopgInstrumentor().uninstrument()
        tracing.uninstall()


def _reconnect() -> None:
    """Drop this thread's connection, and the pool's (they were opened before)."""
    connection.close()
    if getattr(connection, "pool", None) is not None:
        connection.close_pool()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/jobs/bulk"])
def test_the_api_call_is_a_server_span_and_its_jobs_are_its_children(
    team, instrumented, path
) -> None:
    api = client_for(team)  # a new client: its handler loads the instrumented middleware
    body = job_body() if path.endswith("jobs") else {"jobs": [job_body(), job_body()]}
    response = api.post(path, body, format="json", HTTP_TRACEPARENT=TRACEPARENT)
    assert response.status_code == 201, response.content
    [server] = [s for s in instrumented.get_finished_spans() if s.kind is SpanKind.SERVER]
    context = tracing.context_of(server.get_span_context())
    assert tracing.trace_id_of(context) == TRACE
    assert response["traceparent"] == context  # the job's parent: this request's span
    ids = (
        [response.json()["id"]]
        if path.endswith("jobs")
        else [item["id"] for item in response.json()["jobs"]]
    )
    assert set(Job.objects.filter(id__in=ids).values_list("trace_context", flat=True)) == {context}
    if connection.vendor == "postgresql":  # psycopg's statements, inside the request's span
        statements = [
            s
            for s in instrumented.get_finished_spans()
            if s.kind is SpanKind.CLIENT and s.parent is not None
        ]
        assert statements and all(s.context.trace_id == server.context.trace_id for s in statements)
