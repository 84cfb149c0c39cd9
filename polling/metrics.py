"""Prometheus metrics of the pollers, and the per-shard lag read at scrape time.

Counters and histograms live in each ``runpoller`` process (served on its
``--metrics-port``); the per-shard gauges are computed from the database by one
grouped query whenever the web app's /metrics is scraped. Labels are bounded:
result kinds, shard indices; never job ids or URLs.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from polling.writeback import Result

DELIVERIES = Counter(
    "sendlater_deliveries_total",
    "Delivery outcomes written back, by result (delivered, retry, dead, expired, deferred).",
    ["result"],
)
DELIVERY_LATENCY = Histogram(
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
    "Reads that gave a shard's window lock up after the bounded wait (polling.stallbound).",
)
FENCED_REJECTED = Counter(
    "sendlater_fenced_writes_rejected_total",
    "Write-back rows refused by the fence (the lease moved on).",
)
SWEEP_MOVED = Counter(
    "sendlater_sweep_moved_total", "Late-written rows moved from behind a checkpoint."
)
POLLER_ERRORS = Counter(
    "sendlater_poller_iteration_errors_total", "Poller iterations that failed (leases dropped)."
)


class ShardLagCollector(Collector):
    """Per-shard lag, due backlog, oldest due age, jobs in flight and jobs held by flow
    control, read when scraped (lag, backlog and oldest age leave the held out)."""

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Registration asks for the names; answering from collect() would query the
        # database at import time (before migrations, or with no database at all).
        return iter(self._families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from polling.selectors import shard_lag_list
        from scheduling.clock import db_now

        lag, backlog, oldest, in_flight, held, held_oldest = self._families()
        for row in shard_lag_list(now=db_now()):
            label = [str(row.shard)]
            lag.add_metric(label, row.lag_seconds)
            backlog.add_metric(label, row.due_backlog)
            oldest.add_metric(label, row.oldest_due_age_seconds or 0.0)
            in_flight.add_metric(label, row.in_flight)
            held.add_metric(label, row.held)
            held_oldest.add_metric(label, row.held_oldest_age_seconds or 0.0)
        yield from (lag, backlog, oldest, in_flight, held, held_oldest)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        lag = GaugeMetricFamily(
            "sendlater_shard_lag_seconds",
            "now - (checkpoint + W) while due jobs the service could send wait, per shard "
            "(jobs held by flow control left out).",
            labels=["shard"],
        )
        backlog = GaugeMetricFamily(
            "sendlater_shard_due_backlog",
            "Pending jobs already due, not in flight and not held by flow control, per shard.",
            labels=["shard"],
        )
        oldest = GaugeMetricFamily(
            "sendlater_shard_oldest_due_age_seconds",
            "Age of the oldest due pending job not held by flow control, per shard (0 when none).",
            labels=["shard"],
        )
        in_flight = GaugeMetricFamily(
            "sendlater_shard_in_flight_jobs",
            "Jobs read by the shard's owner and not yet written back, per shard.",
            labels=["shard"],
        )
        held = GaugeMetricFamily(
            "sendlater_shard_held_jobs",
            "Due pending jobs held by flow control (a paused key, a key at its rate or "
            "parallelism limit), per shard; per key: sendlater_flow_waiting_jobs.",
            labels=["shard"],
        )
        held_oldest = GaugeMetricFamily(
            "sendlater_shard_held_oldest_age_seconds",
            "Age of the oldest due job held by flow control, per shard (0 when none).",
            labels=["shard"],
        )
        return lag, backlog, oldest, in_flight, held, held_oldest


def outcomes_export(results: Sequence[Result], written: Collection[UUID], now: datetime) -> None:
    """Export what a write-back recorded: outcomes by result, delivery latency.

    One counter increment per result kind, not per job; one latency observation
    per delivered job.
    """
    counts: dict[str, int] = {}
    everything = len(written) == len(results)  # the usual batch: no id lookups
    for result in results:
        if not everything and result.job_id not in written:
            continue
        if result.status == "pending":
            kind = "retry" if result.counted else "deferred"
        else:
            kind = result.status
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "delivered":
            DELIVERY_LATENCY.observe(max(0.0, (now - result.due_at).total_seconds()))
    for kind, count in counts.items():
        DELIVERIES.labels(kind).inc(count)


IN_FLIGHT = Gauge(
    "sendlater_poller_in_flight_jobs",
    "Jobs this poller has read and not yet written back (its dispatch window).",
)
WRITEBACK_GROUP = Histogram(
    "sendlater_writeback_group_size",
    "Results written back per group (one fenced transaction).",
    buckets=(1, 10, 50, 100, 250, 500, 1000, 2000, 5000),
)
FLOW_HELD = Gauge(
    "sendlater_poller_flow_held_keys",
    "Flow-control keys this poller holds back (over their limits or paused).",
)
