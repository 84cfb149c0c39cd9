"""How the console writes a key's limits and the rate in use (no database)."""

from __future__ import annotations

from polling.console.flows import limits_text, rate_in_use_text
from scheduling.flow.models import FlowControl
from scheduling.flow.selectors import FlowState


def _state(delivered: int, **limits) -> FlowState:
    return FlowState(
        FlowControl(key="k", **limits), waiting=0, in_flight=0, delivered_in_period=delivered
    )


def test_rate_in_use_against_the_rate_per_period() -> None:
    assert rate_in_use_text(_state(180, rate=200, period_seconds=1)) == "180 / 200 per 1 s (90 %)"
    assert rate_in_use_text(_state(0, rate=5, period_seconds=60)) == "0 / 5 per 60 s (0 %)"
    assert rate_in_use_text(_state(12, rate=None, parallelism=4)) == "12 (no rate limit)"


def test_limits() -> None:
    assert limits_text(FlowControl(rate=200, period_seconds=1)) == "200 per 1 s"
    assert limits_text(FlowControl(rate=None, parallelism=3)) == "—"
