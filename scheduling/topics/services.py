"""Writes of topics: put and delete a topic, put, delete, enable and disable an endpoint.

Every service is keyword-only and transactional. An endpoint's URL passes the
``callback_url`` rules and SSRF check (``webhook_url_check``), its request settings the
delivery contract's (``RequestChecker``), its key the flow-control key rules. Disabling
an endpoint pauses its delivery key (``delivery_key``): its waiting deliveries stay
pending, expiry still applying, until it is enabled again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from scheduling.choices import EndpointState
from scheduling.errors import InvalidTopic, SchedulingError, TopicNotFound
from scheduling.flow.services import flow_pause_set, key_validate
from scheduling.jobs.requests import (
    DeliveryRequest,
    RequestChecker,
    RequestSealer,
    request_merged,
    webhook_url_check,
)
from scheduling.models import Team
from scheduling.sharding.clock import db_now
from scheduling.topics.models import (
    NAME_MAX_CHARS,
    NAME_PATTERN,
    Topic,
    TopicEndpoint,
    delivery_key,
)

MAX_ENDPOINTS = 100
_NAME = re.compile(NAME_PATTERN)
REASON_MAX_CHARS = 500


@dataclass(frozen=True)
class EndpointSpec:
    """What a team asks of one endpoint."""

    name: str
    url: str
    request: DeliveryRequest | None = None  # method, headers, format, timeout, retry
    flow_control_key: str | None = None
    state: str = EndpointState.ENABLED


def name_validate(name: object, *, field: str) -> str:
    """``name`` if it is a usable topic or endpoint name, else InvalidTopic naming ``field``."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidTopic(
            f"a name is 1 to {NAME_MAX_CHARS} letters, digits, '.', '_' or '-'", field=field
        )
    return name


def endpoint_spec_validate(
    spec: EndpointSpec, *, field: str = "", checker: RequestChecker | None = None
) -> None:
    """Raise a SchedulingError naming ``<field>.<name>`` if ``spec`` cannot be kept."""
    where = f"{field}." if field else ""
    name_validate(spec.name, field=f"{where}id")
    webhook_url_check(spec.url, field=f"{where}url", name="url")
    if spec.request is not None:
        if spec.request.on_success_url or spec.request.on_failure_url:
            raise InvalidTopic("callbacks are the job's, not the endpoint's", field=f"{where}url")
        try:
            (checker or RequestChecker()).check(spec.request, target_kind="webhook", payload=None)
        except SchedulingError as error:
            raise type(error)(error.message, field=f"{where}{error.field}") from error
    if spec.flow_control_key is not None:
        key_validate(spec.flow_control_key, field=f"{where}flow_control_key")
    if spec.state not in EndpointState.values:
        raise InvalidTopic("state is 'enabled' or 'disabled'", field=f"{where}state")


def topic_get(*, team: Team, name: str) -> Topic:
    topic = Topic.objects.filter(team=team, name=name).first()
    if topic is None:
        raise TopicNotFound(f"no topic {name!r}")
    return topic


def topic_put(*, team: Team, name: str, endpoints: Sequence[EndpointSpec]) -> tuple[Topic, bool]:
    """Create or replace topic ``name`` with ``endpoints`` (a PUT: endpoints it does not
    list are removed). Returns the topic and whether it was created."""
    name_validate(name, field="name")
    if len(endpoints) > MAX_ENDPOINTS:
        raise InvalidTopic(f"at most {MAX_ENDPOINTS} endpoints", field="endpoints")
    checker = RequestChecker()
    seen: set[str] = set()
    for spec in endpoints:
        endpoint_spec_validate(spec, field=f"endpoints.{spec.name}", checker=checker)
        if spec.name in seen:
            raise InvalidTopic(f"{spec.name!r} is given twice", field=f"endpoints.{spec.name}")
        seen.add(spec.name)
    now = db_now()
    with transaction.atomic():
        topic, created = _topic_locked(team, name, now)
        kept = {e.name: e for e in topic.endpoints.all()}
        topic.endpoints.exclude(name__in=seen).delete()
        sealer = RequestSealer()
        for spec in endpoints:
            _endpoint_write(topic, kept.get(spec.name), spec, sealer, now)
    return topic, created


def topic_delete(*, team: Team, name: str) -> None:
    """Delete a topic and its endpoints. Jobs naming it that are not yet due end dead at
    their due time; deliveries already made go on."""
    deleted, _ = Topic.objects.filter(team=team, name=name).delete()
    if not deleted:
        raise TopicNotFound(f"no topic {name!r}")


def endpoint_put(*, team: Team, topic: str, spec: EndpointSpec) -> tuple[TopicEndpoint, bool]:
    """Add or replace one endpoint of an existing topic; return it and whether it is new."""
    endpoint_spec_validate(spec)
    now = db_now()
    with transaction.atomic():
        row = _topic_for_update(team, topic)
        current = row.endpoints.filter(name=spec.name).first()
        if current is None and row.endpoints.count() >= MAX_ENDPOINTS:
            raise InvalidTopic(f"at most {MAX_ENDPOINTS} endpoints", field="id")
        endpoint = _endpoint_write(row, current, spec, RequestSealer(), now)
        row.updated_at = now
        row.save(update_fields=["updated_at"])
    return endpoint, current is None


def endpoint_patch(
    *, team: Team, topic: str, name: str, changes: Mapping[str, Any]
) -> TopicEndpoint:
    """Change some of an endpoint's fields (API names: ``url``, the request settings,
    ``flow_control_key``, ``state``); the others, header values included, are kept."""
    with transaction.atomic():
        row = _topic_for_update(team, topic)
        current = row.endpoints.select_for_update().filter(name=name).first()
        if current is None:
            raise TopicNotFound(f"no endpoint {name!r} in topic {topic!r}")
        request = request_merged(current.request, changes)
        spec = EndpointSpec(
            name=name,
            url=changes.get("url", current.url),
            request=None if request.is_default() else request,
            flow_control_key=changes.get("flow_control_key", current.flow_control_key),
            state=changes.get("state", current.state),
        )
        endpoint_spec_validate(spec)
        now = db_now()
        endpoint = _endpoint_write(row, current, spec, RequestSealer(), now)
        row.updated_at = now
        row.save(update_fields=["updated_at"])
    return endpoint


def endpoint_delete(*, team: Team, topic: str, name: str) -> None:
    """Remove one endpoint: later fan-outs leave it out; its deliveries made go on (a
    disabled endpoint's key stays paused: resume it through the flow-control API)."""
    with transaction.atomic():
        row = _topic_for_update(team, topic)
        deleted, _ = row.endpoints.filter(name=name).delete()
    if not deleted:
        raise TopicNotFound(f"no endpoint {name!r} in topic {topic!r}")


def endpoint_state_set(
    *, team: Team, topic: str, name: str, enabled: bool, reason: str = ""
) -> TopicEndpoint:
    """Enable or disable one endpoint, pausing or resuming its delivery key with it."""
    now = db_now()
    with transaction.atomic():
        row = _topic_for_update(team, topic)
        endpoint = row.endpoints.select_for_update().filter(name=name).first()
        if endpoint is None:
            raise TopicNotFound(f"no endpoint {name!r} in topic {topic!r}")
        state = EndpointState.ENABLED if enabled else EndpointState.DISABLED
        if endpoint.state != state:
            _state_apply(endpoint, row, state, reason[:REASON_MAX_CHARS], now)
            endpoint.save()
    return endpoint


def _topic_locked(team: Team, name: str, now: datetime) -> tuple[Topic, bool]:
    topic, created = Topic.objects.select_for_update().get_or_create(
        team=team, name=name, defaults={"created_at": now, "updated_at": now}
    )
    if not created:
        topic.updated_at = now
        topic.save(update_fields=["updated_at"])
    return topic, created


def _topic_for_update(team: Team, name: str) -> Topic:
    topic = Topic.objects.select_for_update().filter(team=team, name=name).first()
    if topic is None:
        raise TopicNotFound(f"no topic {name!r}")
    return topic


def _endpoint_write(
    topic: Topic,
    current: TopicEndpoint | None,
    spec: EndpointSpec,
    sealer: RequestSealer,
    now: datetime,
) -> TopicEndpoint:
    endpoint = current or TopicEndpoint(topic=topic, name=spec.name, created_at=now)
    old_key = None if current is None else _key_of(topic, current)
    was = EndpointState.ENABLED if current is None else current.state
    endpoint.url = spec.url
    endpoint.request = sealer.stored(spec.request)
    endpoint.flow_control_key = spec.flow_control_key
    endpoint.updated_at = now
    if old_key is not None and old_key != _key_of(topic, endpoint) and was != "enabled":
        flow_pause_set(team=topic.team, key=old_key, paused=False)  # the old key goes free
        was = EndpointState.ENABLED
    endpoint.state = was
    if spec.state != was:
        _state_apply(endpoint, topic, spec.state, "set through the API", now)
    endpoint.save()
    return endpoint


def _key_of(topic: Topic, endpoint: TopicEndpoint) -> str:
    return delivery_key(topic.name, endpoint.name, endpoint.flow_control_key)


def _state_apply(
    endpoint: TopicEndpoint, topic: Topic, state: str, reason: str, now: datetime
) -> None:
    """Set ``endpoint``'s state (unsaved) and pause or resume its key (saved)."""
    disabled = state == EndpointState.DISABLED
    endpoint.state = state
    endpoint.disabled_at = now if disabled else None
    endpoint.disabled_reason = reason if disabled else ""
    endpoint.failing_since = None
    endpoint.updated_at = now
    flow_pause_set(team=topic.team, key=_key_of(topic, endpoint), paused=disabled)
