"""Topic endpoints that keep failing are disabled, not hammered (docs/delivery.md, "Topics").

After a group's write-back commits, its topic deliveries (child jobs of a fan-out,
``polling.writing.fanout``) tell their endpoints' health: a delivered one clears the
endpoint's ``failing_since``, a failed attempt (a retry or a dead letter) sets it if
unset. An enabled endpoint whose deliveries have all failed since longer than
SENDLATER_TOPIC_DISABLE_AFTER_SECONDS (default a day) is disabled: its delivery key
is paused, so its waiting deliveries stay pending (expiry still applies) until it is
enabled again, and the team's ``default_on_failure_url``, when set, hears an
``endpoint.disabled`` event, written in the transaction that disables it.

Each written topic delivery also counts in ``sendlater_topic_deliveries_total`` (team,
topic, result), bounded as the flow keys' series are (SENDLATER_METRICS_FLOW_KEYS).

Its own small transaction, after the write-back's: the endpoint's state is not part
of any job's outcome, and a crash between the two only delays the disabling to the
next failure. Groups without topic deliveries cost one pass and no query.

A delivered endpoint's clearing UPDATE runs at most once every ``CLEAR_EVERY_SECONDS``
per endpoint in a process (a burst of deliveries to it writes once a second, not once
a write-back group); a failure this process records for it makes the next delivery
clear again at once. A failure another poller records just after this process's
clear is cleared by this process's deliveries within that second: far inside the
disable period.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from functools import reduce
from operator import or_
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from polling import metrics
from polling.dispatch.base import ClaimedJob
from polling.writing.callbacks import events_insert, team_failure_urls
from polling.writing.fanout import ENDPOINT, TOPIC, TOPIC_OF
from polling.writing.writeback import Result
from scheduling.choices import EndpointState
from scheduling.models import Team, TopicEndpoint
from scheduling.sharding.clock import iso_utc
from scheduling.topics.services import endpoint_state_set

logger = logging.getLogger(__name__)

EVENT = "endpoint.disabled"
_Endpoint = tuple[int, str, str]  # team id, topic, endpoint id

CLEAR_EVERY_SECONDS = 1.0
_CLEARED_KEPT = 10_000  # endpoints remembered at most (all forgotten past it)
_cleared: dict[_Endpoint, float] = {}  # endpoint -> monotonic time this process cleared it


def cleared_forget() -> None:
    """Forget which endpoints this process cleared lately (tests: a rollback undoes it)."""
    _cleared.clear()


def endpoints_health(
    *,
    jobs: Sequence[ClaimedJob],
    results: Sequence[Result],
    written: Collection[UUID],
    now: datetime,
) -> int:
    """Record the written group's topic deliveries on their endpoints; disable those
    failing for too long. Returns how many were disabled. Call after the write-back."""
    topical = {}  # by the id's integer: hashed in C, where a UUID's hash is Python's
    for job in jobs:
        request = job.request
        if request is not None and TOPIC_OF in request:
            topical[job.id.int] = job
    if not topical:
        return 0  # the common group: no topic delivery
    written_ints = {job_id.int for job_id in written}
    tally: dict[tuple[int, str, str, str, bool], int] = {}  # a group has few such keys
    for result in results:
        key = result.job_id.int
        job = topical.get(key)
        if job is None or key not in written_ints:
            continue
        request = job.request
        assert request is not None
        outcome = (job.team_id, request[TOPIC], request[ENDPOINT], result.status, result.counted)
        tally[outcome] = tally.get(outcome, 0) + 1
    ok: set[_Endpoint] = set()
    failed: set[_Endpoint] = set()
    counts: Counter[tuple[int, str, str]] = Counter()
    for (team_id, topic, name, status, counted), n in tally.items():
        if status == "delivered":
            ok.add((team_id, topic, name))
            counts[team_id, topic, "delivered"] += n
        elif counted and status in ("pending", "dead"):
            failed.add((team_id, topic, name))
            counts[team_id, topic, "retry" if status == "pending" else "dead"] += n
    _export(counts)
    failed -= ok  # one went through: the endpoint is not all failing
    clock = time.monotonic()
    for endpoint in failed:  # its failing_since may be set now: the next success clears
        _cleared.pop(endpoint, None)
    stale = {e for e in ok if clock - _cleared.get(e, -CLEAR_EVERY_SECONDS) >= CLEAR_EVERY_SECONDS}
    if stale:
        TopicEndpoint.objects.filter(_matching(stale), failing_since__isnull=False).update(
            failing_since=None
        )
        if len(_cleared) + len(stale) > _CLEARED_KEPT:
            _cleared.clear()
        _cleared.update(dict.fromkeys(stale, clock))
    if not failed:
        return 0
    TopicEndpoint.objects.filter(
        _matching(failed), failing_since__isnull=True, state=EndpointState.ENABLED
    ).update(failing_since=now)
    limit = now - timedelta(seconds=settings.SENDLATER_TOPIC_DISABLE_AFTER_SECONDS)
    doomed = (
        TopicEndpoint.objects.filter(
            _matching(failed), failing_since__lte=limit, state=EndpointState.ENABLED
        )
        .select_related("topic")
        .order_by("id")
    )
    return sum(_disable(endpoint, now) for endpoint in doomed)


# The (team, topic) label pairs this process exports on their own: the first it meets,
# at most SENDLATER_METRICS_FLOW_KEYS; later ones count as topic="_other".
_LABELLED: set[tuple[str, str]] = set()
OTHER_TOPIC = "_other"


def _export(counts: Counter[tuple[int, str, str]]) -> None:
    limit = max(0, int(settings.SENDLATER_METRICS_FLOW_KEYS))
    for (team_id, topic, result), n in counts.items():
        pair = (str(team_id), topic)
        if pair not in _LABELLED:
            if len(_LABELLED) >= limit:
                pair = ("", OTHER_TOPIC)
            else:
                _LABELLED.add(pair)
        metrics.TOPIC_DELIVERIES.labels(*pair, result).inc(n)


def _matching(endpoints: set[_Endpoint]) -> Q:
    return reduce(
        or_,
        (Q(topic__team_id=t, topic__name=topic, name=name) for t, topic, name in endpoints),
    )


def _disable(endpoint: TopicEndpoint, now: datetime) -> int:
    topic = endpoint.topic
    since = endpoint.failing_since
    assert since is not None
    reason = f"every delivery failed since {iso_utc(since)}"
    with transaction.atomic():
        endpoint_state_set(
            team=Team(pk=topic.team_id),
            topic=topic.name,
            name=endpoint.name,
            enabled=False,
            reason=reason,
        )
        url = team_failure_urls({topic.team_id}).get(topic.team_id)
        if url:
            event = {
                "type": EVENT,
                "topic": topic.name,
                "endpoint": endpoint.name,
                "url": endpoint.url,
                "failing_since": iso_utc(since),
                "disabled_at": iso_utc(now),
                "reason": reason,
            }
            events_insert([(topic.team_id, f"{topic.name}/{endpoint.name}", url, event)], now)
    logger.warning(
        "topic %s: endpoint %s disabled (%s)",
        topic.name,
        endpoint.name,
        reason,
        extra={"team": topic.team_id, "topic": topic.name, "endpoint": endpoint.name},
    )
    return 1
