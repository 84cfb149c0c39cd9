"""Traces across the wait: the W3C trace context a job keeps, and OpenTelemetry, off
unless configured (docs/operations.md, "Traces").

A job keeps the trace context it was created in (``Job.trace_context``): the
``traceparent`` and, after one space, the ``tracestate`` if any (a traceparent never
holds a space). Every delivery attempt sends a ``traceparent`` of its own span in that
trace (``polling.dispatch.spans``), so the receiver's spans join the scheduling
request's trace.

Tracing is on in a process when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``,
``console``) and the process runs ``install_from_env`` (the scheduling app's
``ready``): ``TRACER`` is then set. Unset or ``none``: nothing of the SDK is imported
or installed, and every caller checks ``TRACER is None`` once per request or batch,
never per job. With tracing off a create still keeps a valid ``traceparent`` it was
sent (a header read), but makes none, and the pollers send none.

Imports nothing of the project (a base module of ``scheduling``).
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)

# Set by ``install``: the tracer every span of the service is made with. None: off.
TRACER: Any = None
_PROVIDER: Any = None

TRACESTATE_MAX_CHARS = 512  # W3C: a vendor must propagate at least this much
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
_OFF = ("", "none")


# --- the stored context (pure: no OpenTelemetry) -----------------------------------


def context_parse(traceparent: str | None, tracestate: str | None = None) -> str | None:
    """The stored form of a W3C ``traceparent`` (and ``tracestate``); None for a missing
    or invalid traceparent, which the W3C rules say to ignore (a new trace starts).

    A later version's traceparent is read as version 00 (its first four fields); a
    tracestate that is not printable ASCII or is longer than TRACESTATE_MAX_CHARS is
    dropped, the traceparent kept.
    """
    if not traceparent or not isinstance(traceparent, str):
        return None
    match = _TRACEPARENT.fullmatch(traceparent.strip(" \t"))
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == _ZERO_TRACE:
        return None
    if span_id == _ZERO_SPAN:
        return None
    parent = f"00-{trace_id}-{span_id}-{flags}"
    state = (tracestate or "").strip(" \t") if isinstance(tracestate, str) else ""
    if state and len(state) <= TRACESTATE_MAX_CHARS and _printable(state):
        return f"{parent} {state}"
    return parent


def _printable(text: str) -> bool:
    return text.isascii() and text.isprintable()


def context_split(stored: str) -> tuple[str, str | None]:
    """``(traceparent, tracestate or None)`` of a stored context."""
    parent, _, state = stored.partition(" ")
    return parent, state or None


def trace_id_of(stored: str) -> str:
    """The 32 hex digits of a stored context's trace id."""
    return stored[3:35]


def context_of_request(meta: Mapping[str, Any]) -> str | None:
    """The context a job created by this request keeps (``request.META``).

    Tracing on: the current span's (the Django instrumentation's server span, a child
    of the request's ``traceparent`` if it sent one, else the root of a new trace).
    Off: the request's own ``traceparent``/``tracestate``, None if absent or invalid.
    """
    return context_current() or context_parse(
        meta.get("HTTP_TRACEPARENT"), meta.get("HTTP_TRACESTATE")
    )


# --- with OpenTelemetry (only where TRACER is set) -----------------------------------


def context_current() -> str | None:
    """The current span's context, stored form; None with tracing off or no span."""
    if TRACER is None:
        return None
    from opentelemetry import trace

    return context_of(trace.get_current_span().get_span_context())


def context_new(name: str, **attributes: Any) -> str | None:
    """A context for jobs created outside any span (tracing on): the current span's,
    else that of a new root span ``name``, ended at once. None with tracing off."""
    if TRACER is None:
        return None
    current = context_current()
    if current is not None:
        return current
    span = TRACER.start_span(name, attributes=attributes)
    span.end()
    return context_of(span.get_span_context())


def context_of(span_context: Any) -> str | None:
    """The stored form of an OpenTelemetry ``SpanContext``; None if it is not valid."""
    if span_context is None or not span_context.is_valid:
        return None
    parent = (
        f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}"
        f"-{int(span_context.trace_flags) & 0xFF:02x}"
    )
    state = span_context.trace_state.to_header() if span_context.trace_state else ""
    return f"{parent} {state}" if state else parent


def span_context_of(stored: str) -> Any:
    """The remote ``SpanContext`` of a stored context (its span is the parent or the
    link target of the spans made for the job)."""
    from opentelemetry.trace import SpanContext, TraceFlags, TraceState

    parent, state = context_split(stored)
    trace_state = TraceState.from_header([state]) if state else None
    return SpanContext(
        int(parent[3:35], 16),
        int(parent[36:52], 16),
        is_remote=True,
        trace_flags=TraceFlags(int(parent[53:55], 16)),
        trace_state=trace_state,
    )


def span_id_reserve() -> int:
    """A span id to announce before the span exists (a delivery's ``traceparent``);
    ``with_span_id`` gives it to the span made afterwards."""
    return random.getrandbits(64) or 1


@contextmanager
def with_span_id(span_id: int) -> Iterator[None]:
    """Within it, the next span started on this thread gets span id ``span_id``."""
    _RESERVED.span_id = span_id
    try:
        yield
    finally:
        _RESERVED.span_id = 0


_RESERVED = threading.local()


def _reserved_ids() -> Any:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class ReservedIds(RandomIdGenerator):
        """Random ids, but the span id reserved on this thread (``with_span_id``)."""

        def generate_span_id(self) -> int:
            reserved = getattr(_RESERVED, "span_id", 0)
            if reserved:
                _RESERVED.span_id = 0
                return reserved
            return super().generate_span_id()

    return ReservedIds()


def _statements_need_a_parent(sampler: Any) -> Any:
    """``sampler``, but a database statement with no span around it (a poller's lease
    renewal, its frontier reads) is not recorded: it would be a trace of one span."""
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
    from opentelemetry.trace import SpanKind, get_current_span

    class StatementsNeedAParent(Sampler):
        def should_sample(
            self,
            parent_context: Any,
            trace_id: int,
            name: str,
            kind: Any = None,
            attributes: Any = None,
            links: Any = None,
            trace_state: Any = None,
        ) -> Any:
            if (
                kind is SpanKind.CLIENT
                and attributes
                and ("db.system" in attributes or "db.system.name" in attributes)
                and not get_current_span(parent_context).get_span_context().is_valid
            ):
                return SamplingResult(Decision.DROP)
            return sampler.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )

        def get_description(self) -> str:
            return f"StatementsNeedAParent{{{sampler.get_description()}}}"

    return StatementsNeedAParent()


def provider_build(exporter: Any, *, batch: bool = True, sampler: Any = None) -> Any:
    """A TracerProvider exporting to ``exporter``: its resource and sampler from the
    ``OTEL_*`` variables (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
    ``OTEL_TRACES_SAMPLER[_ARG]``; default parent-based, always on) unless given, a
    batch span processor (``OTEL_BSP_*``), and the reserved span ids of deliveries."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import _get_from_env_or_default

    if sampler is None:
        sampler = _get_from_env_or_default()
    resource = Resource.create(
        {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "sendlater"}
    )
    provider = TracerProvider(
        sampler=_statements_need_a_parent(sampler),
        resource=resource,
        id_generator=_reserved_ids(),
    )
    processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return provider


def exporter_from_env(name: str) -> Any:
    """The span exporter ``OTEL_TRACES_EXPORTER`` names: ``otlp`` (OTLP over HTTP,
    ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``, default http://localhost:4318) or
    ``console``. ValueError for any other."""
    if name == "otlp":
        protocol = os.environ.get(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        )
        if protocol != "http/protobuf":
            raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: only http/protobuf")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    raise ValueError(f"OTEL_TRACES_EXPORTER={name!r}: expected otlp, console or none")


def install_from_env(environ: Mapping[str, str] = os.environ) -> bool:
    """Install tracing if ``OTEL_TRACES_EXPORTER`` names an exporter (``OTEL_SDK_DISABLED``
    true: not); return whether it is on. Also instruments Django (the API's requests)
    and psycopg (their statements). Idempotent."""
    name = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if name in _OFF or environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if TRACER is not None:
        return True
    if "," in name:
        raise ValueError(f"OTEL_TRACES_EXPORTER={name!r}: one exporter only")
    install(provider_build(exporter_from_env(name)))
    _instrument_libraries()
    logger.info("tracing on: exporter %s", name)
    return True


def _instrument_libraries() -> None:
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    if not DjangoInstrumentor().is_instrumented_by_opentelemetry:
        DjangoInstrumentor().instrument(tracer_provider=_PROVIDER)
    if not PsycopgInstrumentor().is_instrumented_by_opentelemetry:
        PsycopgInstrumentor().instrument(tracer_provider=_PROVIDER, skip_dep_check=True)


def install(provider: Any) -> None:
    """Trace with ``provider`` in this process (tests give one with an in-memory exporter)."""
    global TRACER, _PROVIDER
    from opentelemetry import trace

    _PROVIDER = provider
    TRACER = provider.get_tracer("sendlater")
    # The global provider too, for the instrumentations and a handler's own spans
    # (OpenTelemetry sets it once per process: a second install keeps the first).
    if not isinstance(trace.get_tracer_provider(), type(provider)):
        trace.set_tracer_provider(provider)


def uninstall() -> None:
    """Tracing off again (tests): spans already ended are flushed."""
    global TRACER, _PROVIDER
    provider, TRACER, _PROVIDER = _PROVIDER, None, None
    if provider is not None:
        provider.force_flush()


def now_ns() -> int:
    return time.time_ns()
