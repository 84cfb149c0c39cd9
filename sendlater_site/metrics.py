"""The /metrics endpoint (Prometheus text format) and the API request middleware.

Under gunicorn each worker counts its own requests; set PROMETHEUS_MULTIPROC_DIR
(gunicorn.conf.py does) and the endpoint aggregates every worker's files.
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
    multiprocess,
)

from polling.reading.lag import ShardLagCollector
from scheduling.flow.metrics import FlowControlCollector
from scheduling.metrics import (
    API_LATENCY,
    API_REQUESTS,
    SCRAPE_COLLECTORS,
    register_scrape_collector,
)

# Per-shard lag and backlog, computed from the database at each scrape.
register_scrape_collector(ShardLagCollector())
# Flow-control keys: the top SENDLATER_METRICS_FLOW_KEYS by waiting, the rest summed.
register_scrape_collector(FlowControlCollector())


def _registry() -> CollectorRegistry:
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY  # scrape collectors are registered on it already
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    for collector in SCRAPE_COLLECTORS:
        registry.register(collector)
    return registry


@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve metrics to a scraper holding SENDLATER_METRICS_TOKEN (404 otherwise)."""
    token = settings.SENDLATER_METRICS_TOKEN
    sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    if not token or not hmac.compare_digest(sent.encode(), token.encode()):
        raise Http404
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)


class ApiMetricsMiddleware:
    """Count API requests by route pattern (bounded), method and status."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/"):
            return self.get_response(request)
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        endpoint = match.route if match is not None else "unmatched"
        api_request_record(endpoint, request.method, response.status_code, started)
        return response


# Labelled children by (endpoint, method, status): prometheus_client's ``labels`` takes
# a lock and checks the values on every call. The labels are bounded (route patterns).
_children: dict[tuple[str, str | None, int], tuple[Any, Any]] = {}


def api_request_record(endpoint: str, method: str | None, status: int, started: float) -> None:
    """Count an API request to the route pattern ``endpoint`` begun at ``started``
    (``time.perf_counter()``)."""
    key = (endpoint, method, status)
    children = _children.get(key)
    if children is None:
        children = _children[key] = (
            API_REQUESTS.labels(endpoint, method, str(status)),
            API_LATENCY.labels(endpoint),
        )
    children[0].inc()
    children[1].observe(time.perf_counter() - started)
