"""A stored request with no key that shapes the HTTP request sends the default webhook."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest

from polling.dispatch import webhook
from polling.dispatch.base import ClaimedJob

NOW = datetime(2026, 12, 6, tzinfo=UTC)


def job(request: dict) -> ClaimedJob:
    out = ClaimedJob(uuid4(), 1, NOW, NOW, 0, 1, "webhook", "http://x.test/", {"a": 1}, {}, None)
    out.request = request
    return out


@pytest.mark.parametrize(
    "request_",
    [
        {"capture_response": True},
        {"callbacks": {"on_success": "u"}, "on_success_url": "http://x.test/done"},
        {"topic": "orders", "endpoint": "billing", "topic_of": str(uuid4())},
    ],
)
def test_a_request_without_shaping_keys_is_the_default_webhook(request_) -> None:
    assert webhook._SHAPING.isdisjoint(request_)
    one = job(request_)
    # What the full shaping would send is exactly the default's body and headers.
    assert webhook.shaped_request(one, request_) == (webhook.request_body(one), webhook._HEADERS)


@pytest.mark.parametrize(
    "request_",
    [
        {"format": "payload"},
        {"format": "payload", "content_type": "text/plain"},
        {"method": "GET"},
    ],
)
def test_a_request_that_shapes_the_http_request_takes_the_shaped_path(request_) -> None:
    one = job(request_)
    assert not webhook._SHAPING.isdisjoint(request_)
    assert webhook.shaped_request(one, request_) != (webhook.request_body(one), webhook._HEADERS)


def test_the_method_and_timeout_keys_take_the_shaped_path() -> None:
    # Read by the sink beside shaped_request: the default path would drop them.
    assert {"method", "timeout_seconds", "headers_sealed"} <= webhook._SHAPING
