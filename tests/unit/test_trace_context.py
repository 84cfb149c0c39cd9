"""The W3C trace context a job keeps (``scheduling.tracing``): parsed by the W3C rules,
and tracing off unless OTEL_TRACES_EXPORTER names an exporter."""

from __future__ import annotations

import pytest

from scheduling import tracing

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("traceparent", "tracestate", "stored"),
    [
        (PARENT, None, PARENT),
        (f" {PARENT} ", "", PARENT),
        (
            PARENT,
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
            f"{PARENT} rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
        ),
        (PARENT, "x" * 513, PARENT),  # too long: dropped, the traceparent kept
        (PARENT, "a=b\nc=d", PARENT),
        # A later version: its first four fields, as version 00.
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-else", None, PARENT),
        (PARENT.replace("-01", "-00"), None, PARENT.replace("-01", "-00")),
    ],
)
def test_valid_contexts_are_kept(traceparent, tracestate, stored) -> None:
    assert tracing.context_parse(traceparent, tracestate) == stored


@pytest.mark.parametrize(
    "traceparent",
    [
        None,
        "",
        PARENT.upper(),
        PARENT + "-extra",  # version 00 has exactly four fields
        "ff" + PARENT[2:],
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        12,
    ],
)
def test_invalid_traceparents_are_ignored(traceparent) -> None:
    assert tracing.context_parse(traceparent, "rojo=1") is None


def test_split_and_trace_id() -> None:
    assert tracing.context_split(f"{PARENT} a=1") == (PARENT, "a=1")
    assert tracing.context_split(PARENT) == (PARENT, None)
    assert tracing.trace_id_of(PARENT) == "4bf92f3577b34da6a3ce929d0e0e4736"


def test_a_stored_context_round_trips_through_a_span_context() -> None:
    stored = f"{PARENT} rojo=00f067aa0ba902b7"
    assert tracing.context_of(tracing.span_context_of(stored)) == stored


@pytest.mark.parametrize("value", [None, "", "none", " None "])
def test_tracing_is_off_unless_an_exporter_is_named(value) -> None:
    environ = {} if value is None else {"OTEL_TRACES_EXPORTER": value}
    assert tracing.install_from_env(environ) is False
    assert tracing.TRACER is None
    assert tracing.context_current() is None and tracing.context_new("x") is None


def test_an_unknown_exporter_is_refused() -> None:
    with pytest.raises(ValueError, match="OTEL_TRACES_EXPORTER"):
        tracing.exporter_from_env("zipkin")
    assert tracing.TRACER is None
