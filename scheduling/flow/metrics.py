"""Flow-control gauges on the web app's /metrics, read at scrape time and bounded.

Keys are the teams' own names, so one series per key would let the number of
series grow with the teams. Only the ``SENDLATER_METRICS_FLOW_KEYS`` keys with the
most waiting jobs get series of their own (labels ``team`` slug and ``key``); the
rest are summed into one series with ``team=""`` and ``key="_other"``, always
present. One scrape costs the few grouped reads of ``flow_states_by_waiting``.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.conf import settings
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

OTHER_KEY = "_other"


class FlowControlCollector(Collector):
    """Per-key waiting, in flight, paused and deliveries in the period; the key count."""

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # As ShardLagCollector: names only, no database read at registration.
        return iter(self._families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from scheduling.flow.selectors import flow_states_by_waiting

        waiting, in_flight, paused, period, keys = self._families()
        states = flow_states_by_waiting()
        top = max(0, int(settings.SENDLATER_METRICS_FLOW_KEYS))
        for state in states[:top]:
            labels = [state.flow.team.slug, state.flow.key]
            waiting.add_metric(labels, state.waiting)
            in_flight.add_metric(labels, state.in_flight)
            paused.add_metric(labels, 1 if state.flow.paused else 0)
            period.add_metric(labels, state.delivered_in_period)
        rest = states[top:]
        other = ["", OTHER_KEY]
        waiting.add_metric(other, sum(s.waiting for s in rest))
        in_flight.add_metric(other, sum(s.in_flight for s in rest))
        paused.add_metric(other, sum(1 for s in rest if s.flow.paused))
        period.add_metric(other, sum(s.delivered_in_period for s in rest))
        keys.add_metric([], len(states))
        yield from (waiting, in_flight, paused, period, keys)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        labels = ["team", "key"]
        return (
            GaugeMetricFamily(
                "sendlater_flow_waiting_jobs",
                "Due pending jobs held back by their flow-control key (top keys, the rest "
                'summed as key="_other").',
                labels=labels,
            ),
            GaugeMetricFamily(
                "sendlater_flow_in_flight_jobs",
                "Deliveries of the key in flight across all pollers.",
                labels=labels,
            ),
            GaugeMetricFamily(
                "sendlater_flow_paused",
                'Whether the key is paused (1) or not (0); for key="_other", paused keys.',
                labels=labels,
            ),
            GaugeMetricFamily(
                "sendlater_flow_period_deliveries",
                "Deliveries the key started in its current rate period.",
                labels=labels,
            ),
            GaugeMetricFamily("sendlater_flow_keys", "Flow-control keys of all teams."),
        )
