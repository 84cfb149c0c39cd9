"""Prometheus metrics of the pollers (the per-shard gauges: ``polling.reading.lag``).

Counters and histograms live in each ``runpoller`` process (served on its
``--metrics-port``); the per-shard gauges are computed from the database by one
grouped query whenever the web app's /metrics is scraped. Labels are bounded:
result kinds, shard indices; never job ids or URLs.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString


class GroupHistogram:
    """A histogram observed a group of values at a time (``observe_many``): one lock
    and a bisect a value, where ``Histogram.observe`` takes ~1.5 us a value (a lock
    and a walk of the buckets each). Exposed as ``Histogram`` is: ``_bucket`` (by
    ``le``, cumulative), ``_count``, ``_sum``."""

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: Iterable[float],
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self.name, self.documentation = name, documentation
        self._bounds = (*sorted(float(b) for b in buckets), float("inf"))
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self._lock = threading.Lock()
        registry.register(self)

    def observe_many(self, values: Iterable[float]) -> None:
        bounds, counts, total = self._bounds, [0] * len(self._bounds), 0.0
        for value in values:
            counts[bisect_left(bounds, value)] += 1  # the first bound >= value: le
            total += value
        with self._lock:
            self._counts = [a + b for a, b in zip(self._counts, counts, strict=True)]
            self._sum += total

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, buckets = 0, []
        for bound, count in zip(self._bounds, counts, strict=True):
            cumulative += count
            buckets.append((floatToGoString(bound), cumulative))
        yield HistogramMetricFamily(
            self.name,
            self.documentation,
            buckets=buckets,
            sum_value=total,
        )


DELIVERIES = Counter(
    "sendlater_deliveries_total",
    "Delivery outcomes written back, by result (delivered, retry, dead, expired, deferred).",
    ["result"],
)
DELIVERY_LATENCY = GroupHistogram(  # a write-back group's delivered jobs at once
    "sendlater_delivery_latency_seconds",
    "delivered_at - due_at of delivered jobs.",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
CLAIM_BATCH = Histogram(
    "sendlater_claim_batch_size",
    "Jobs per read batch (empty reads are not observed).",
    buckets=(1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000),
)
LEASES_ACQUIRED = Counter("sendlater_lease_acquisitions_total", "Shard leases acquired.")
LEASES_LOST = Counter(
    "sendlater_lease_losses_total", "Shard leases found lost at renewal or at write-back."
)
WINDOWS_BUSY = Counter(
    "sendlater_window_lock_waits_abandoned_total",
    "Reads that gave a shard's window lock up after the bounded wait (the stall bounds).",
)
FENCED_REJECTED = Counter(
    "sendlater_fenced_writes_rejected_total",
    "Write-back rows refused by the fence (the lease moved on).",
)
SWEEP_MOVED = Counter(
    "sendlater_sweep_moved_total", "Late-written rows moved from behind a checkpoint."
)
BREAKER_HELD = Counter(
    "sendlater_webhooks_breaker_held_total",
    "Webhooks refused by their host's open circuit breaker (no request made) and held "
    "in the poller's window until its cool-down ends: no write, no attempt.",
)
POLLER_ERRORS = Counter(
    "sendlater_poller_iteration_errors_total", "Poller iterations that failed (leases dropped)."
)


IN_FLIGHT = Gauge(
    "sendlater_poller_in_flight_jobs",
    "Jobs this poller has read and not yet written back (its dispatch window).",
)
WRITEBACK_GROUP = Histogram(
    "sendlater_writeback_group_size",
    "Results written back per group (one fenced transaction).",
    buckets=(1, 10, 50, 100, 250, 500, 1000, 2000, 5000),
)
WRITEBACK_SLOW = Counter(
    "sendlater_writeback_slow_total",
    "Write-back transactions that took longer than lease/3 (the poller's thread renews no "
    "lease meanwhile): a slow statement to look for in the database's log.",
)
FLOW_HELD = Gauge(
    "sendlater_poller_flow_held_keys",
    "Flow-control keys this poller holds back (over their limits or paused).",
)
TOPIC_DELIVERIES = Counter(
    "sendlater_topic_deliveries_total",
    "Outcomes of topic deliveries written back, by team id, topic and result (delivered, "
    "retry, dead); the first SENDLATER_METRICS_FLOW_KEYS topics a poller meets get series "
    'of their own, the rest count as team="", topic="_other".',
    ["team", "topic", "result"],
)
