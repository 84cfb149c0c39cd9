"""Prometheus metrics of the scheduling side (API and services).

Labels are bounded: endpoint route names, methods, status codes, target kinds;
never job ids, teams' URLs or free text.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.registry import Collector

JOBS_SCHEDULED = Counter(
    "sendlater_jobs_scheduled_total",
    "Jobs created (idempotent replays not counted), by target kind.",
    ["target_kind"],
)
API_REQUESTS = Counter(
    "sendlater_api_requests_total",
    "HTTP requests to the API, by route, method and status code.",
    ["endpoint", "method", "status"],
)
API_LATENCY = Histogram(
    "sendlater_api_request_seconds",
    "API request duration, by route.",
    ["endpoint"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

# Collectors computed at scrape time (e.g. per-shard lag read from the database);
# the web /metrics view adds them to whichever registry it serves.
SCRAPE_COLLECTORS: list[Collector] = []


def register_scrape_collector(collector: Collector) -> None:
    if collector not in SCRAPE_COLLECTORS:
        SCRAPE_COLLECTORS.append(collector)
        REGISTRY.register(collector)
