"""A poller's spans (tracing on, ``scheduling.tracing``): one per delivery attempt, in
the job's trace; one per read and per write-back, linked to the jobs it carries.

A delivery's span is made in the poller's process from the attempt's Outcome (its
start and duration), after the request: the transport process only sends the
``traceparent`` header (``delivery_headers``), which announces the span id reserved
for it. Reads and write-backs are one span per batch, not one per job: each links to
at most LINKS_MAX of its jobs' contexts and counts them all.

Nothing here runs with tracing off: every caller checks ``tracing.TRACER`` once per
batch first (the decorators and ``batch_open`` do).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

from opentelemetry import context, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from polling.dispatch.base import ClaimedJob, Outcome
from scheduling import tracing

LINKS_MAX = 32  # links of one read or write-back span: its first jobs with a context
DELIVERY_METHOD = "POST"  # the default webhook's (the delivery contract may set another)

F = TypeVar("F", bound=Callable[..., Any])


def delivery_headers(job: ClaimedJob, headers: list[str]) -> tuple[list[str], int]:
    """``headers`` with the job's ``traceparent`` (a new span id in its trace, the
    context's flags) and ``tracestate``, and that span id. For a job with a context."""
    parent, state = tracing.context_split(job.trace_context or "")
    span_id = tracing.span_id_reserve()
    mine = [*headers, f"traceparent: 00-{parent[3:35]}-{span_id:016x}-{parent[53:55]}"]
    if state:
        mine.append(f"tracestate: {state}")
    return mine, span_id


def delivery_span(job: ClaimedJob, outcome: Outcome, span_id: int) -> None:
    """Record the span of one delivery attempt, the child of the job's context, with the
    span id its ``traceparent`` announced. A deferred outcome (never tried) has none."""
    if outcome.result == "deferred" or tracing.TRACER is None or not job.trace_context:
        return
    parent = trace.set_span_in_context(
        trace.NonRecordingSpan(tracing.span_context_of(job.trace_context))
    )
    started = outcome.started_at
    method = _method(job)
    attributes = _delivery_attributes(job, outcome, method)
    with tracing.with_span_id(span_id):
        span = tracing.TRACER.start_span(
            method,
            context=parent,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=_ns(started) if started else None,
        )
    if outcome.result != "delivered":
        span.set_status(Status(StatusCode.ERROR, outcome.error[:200] or outcome.result))
    end = None
    if started is not None and outcome.duration_seconds is not None:
        end = _ns(started + timedelta(seconds=outcome.duration_seconds))
    span.end(end_time=end)


def _method(job: ClaimedJob) -> str:
    """The attempt's HTTP method: the delivery contract's (``Job.request``), else POST."""
    return DELIVERY_METHOD if job.request is None else job.request.get("method", DELIVERY_METHOD)


def _delivery_attributes(job: ClaimedJob, outcome: Outcome, method: str) -> dict[str, Any]:
    # Few attributes: each costs ~5 us of the poller's CPU per span to set and encode
    # (docs/performance.md, "Traces"). The team and the URL's scheme and port are the
    # job's (its id finds them); errors and occurrences add theirs.
    attributes: dict[str, Any] = {
        "http.request.method": method,
        "server.address": _host(job.target),
        "sendlater.job.id": str(job.id),
        "sendlater.job.attempt": job.attempt,
        "sendlater.outcome": outcome.result,
    }
    if outcome.status_code is not None:
        attributes["http.response.status_code"] = outcome.status_code
    if outcome.result != "delivered":
        attributes["error.type"] = (
            str(outcome.status_code) if outcome.status_code is not None else "no_response"
        )
    if outcome.started_at is not None:
        lag = (outcome.started_at - job.due_at).total_seconds()
        attributes["sendlater.lag_seconds"] = round(max(lag, 0.0), 6)
    if job.schedule_id is not None:
        attributes["sendlater.schedule.id"] = str(job.schedule_id)
    return attributes


@functools.lru_cache(maxsize=4096)
def _host(url: str) -> str:
    """The host of a target URL (a poller sends to few, many times each)."""
    return urlsplit(url).hostname or ""


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def handler_traced(call: Callable[[ClaimedJob], Outcome], job: ClaimedJob) -> Outcome:
    """``call(job)`` (an in-process handler's delivery) inside a span of the attempt, the
    child of the job's context and the current span while the handler runs: its own
    spans join the job's trace. For a job with a context, tracing on."""
    parent = trace.set_span_in_context(
        trace.NonRecordingSpan(tracing.span_context_of(job.trace_context or ""))
    )
    attributes = {
        "sendlater.handler": job.target,
        "sendlater.job.id": str(job.id),
        "sendlater.job.attempt": job.attempt,
        "sendlater.team.id": job.team_id,
    }
    with tracing.TRACER.start_as_current_span(
        f"handler {job.target}", context=parent, attributes=attributes
    ) as span:
        outcome = call(job)
        span.set_attribute("sendlater.outcome", outcome.result)
        if outcome.started_at is not None:
            lag = (outcome.started_at - job.due_at).total_seconds()
            span.set_attribute("sendlater.lag_seconds", round(max(lag, 0.0), 6))
        if outcome.result != "delivered":
            span.set_status(Status(StatusCode.ERROR, outcome.error[:200] or outcome.result))
    return outcome


# --- reads and write-backs: one span a batch, linked to its jobs -----------------------


def traced_read(name: str, *attribute_names: str) -> Callable[[F], F]:
    """Trace a keyword-only read that returns its jobs: one span ``name`` around it (its
    statements are its children), with the keyword arguments ``attribute_names`` as
    ``sendlater.<name>`` attributes, linked to the jobs read."""

    def decorate(read: F) -> F:
        @functools.wraps(read)
        def traced(**kwargs: Any) -> Any:
            if tracing.TRACER is None:
                return read(**kwargs)
            attributes = {
                f"sendlater.{key}": _attribute(kwargs[key])
                for key in attribute_names
                if kwargs.get(key) is not None
            }
            with tracing.TRACER.start_as_current_span(name, attributes=attributes) as span:
                jobs = read(**kwargs)
                _link(span, jobs)
            return jobs

        return traced  # type: ignore[return-value]

    return decorate


def _attribute(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def batch_open(name: str, **attributes: Any) -> Any:
    """Start a batch span ``name`` and make it current (its statements are its children);
    None with tracing off. End it with ``batch_close`` (in a ``finally``)."""
    if tracing.TRACER is None:
        return None
    span = tracing.TRACER.start_span(
        name, attributes={f"sendlater.{k}": _attribute(v) for k, v in attributes.items()}
    )
    token = context.attach(trace.set_span_in_context(span))
    return span, token


def batch_close(opened: Any, *groups: Iterable[ClaimedJob]) -> None:
    """End a ``batch_open`` span, linked to the jobs of ``groups``; an exception being
    handled marks it failed."""
    if opened is None:
        return
    span, token = opened
    context.detach(token)
    _link(span, [job for group in groups for job in group])
    error = sys.exc_info()[1]
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, type(error).__name__))
    span.end()


def _link(span: Any, jobs: Iterable[ClaimedJob]) -> None:
    count = linked = 0
    for job in jobs:
        count += 1
        if job.trace_context and linked < LINKS_MAX:
            span.add_link(
                tracing.span_context_of(job.trace_context),
                {"sendlater.job.id": str(job.id), "sendlater.job.attempt": job.attempt},
            )
            linked += 1
    span.set_attribute("sendlater.jobs", count)
    span.set_attribute("sendlater.links", linked)


# --- schedules' occurrences ------------------------------------------------------------


def occurrence_context(
    schedule_context: str, *, schedule_id: Any, scheduled_for: datetime
) -> str | None:
    """The context an occurrence of a schedule keeps: a new trace of its own, whose root
    span (``sendlater.schedule.occurrence``, made as the occurrence is written) links
    to the schedule's context. None with tracing off (docs/schedules.md says why a
    trace of its own, not the schedule's)."""
    if tracing.TRACER is None:
        return None
    attributes = {
        "sendlater.schedule.id": str(schedule_id),
        "sendlater.schedule.scheduled_for": scheduled_for.isoformat(),
    }
    span = tracing.TRACER.start_span(
        "sendlater.schedule.occurrence",
        context=context.Context(),  # a root: never the planner's current span
        links=[Link(tracing.span_context_of(schedule_context))],
        attributes=attributes,
    )
    span.end()
    return tracing.context_of(span.get_span_context())
