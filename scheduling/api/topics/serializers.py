"""Request and response shapes of the topics API. Validation only: no writes here."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from scheduling.api import contract
from scheduling.api.fields import (
    AwareDateTimeField,
    CallbackUrlField,
    FlowControlKeyField,
    StrictCharField,
    TopicNameField,
)
from scheduling.api.jobs.serializers import StrictSerializer
from scheduling.api.request_fields import (
    DeliveryContractFields,
    RetryPolicySerializer,
    contract_cross_check,
    delivery_request_from,
)
from scheduling.choices import EndpointState
from scheduling.jobs import requests as rq
from scheduling.jobs.requests import request_public
from scheduling.sharding.clock import iso_utc
from scheduling.topics.models import NAME_MAX_CHARS, Topic, TopicEndpoint, delivery_key
from scheduling.topics.services import MAX_ENDPOINTS, REASON_MAX_CHARS, EndpointSpec

_NAME_MESSAGE = f"1 to {NAME_MAX_CHARS} letters, digits, '.', '_' or '-'."


class TopicNameSerializer(StrictSerializer):
    """The ``{name}`` (and ``{endpoint}``) of the path: a bad one is a 400 naming it."""

    name = TopicNameField()
    endpoint = TopicNameField(required=False)


class EndpointSetSerializer(StrictSerializer, DeliveryContractFields):
    """One endpoint: its URL, the delivery contract's request settings, its key, its state."""

    # Callbacks and kept responses are the job's: every endpoint's delivery has them.
    on_success_url = None
    on_failure_url = None
    capture_response = None
    url = CallbackUrlField(max_length=2048, help_text="http(s) URL, the callback_url rules.")
    flow_control_key = FlowControlKeyField(
        required=False,
        allow_null=True,
        help_text="Obey this key's limits. Default: the endpoint's own key, topic:<name>:<id>.",
    )
    state = serializers.ChoiceField(
        choices=EndpointState.choices,
        required=False,
        help_text="disabled: its deliveries wait (expiry applies) until it is enabled.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        contract_cross_check(attrs)
        return attrs


class EndpointPatchSerializer(EndpointSetSerializer):
    """Every field optional: what is given changes, the rest (header values too) stays."""

    url = CallbackUrlField(max_length=2048, required=False, help_text="A new URL.")


def endpoint_spec_from(name: str, data: Mapping[str, Any]) -> EndpointSpec:
    return EndpointSpec(
        name=name,
        url=data["url"],
        request=delivery_request_from(data),
        flow_control_key=data.get("flow_control_key"),
        state=data.get("state", EndpointState.ENABLED),
    )


class TopicPutSerializer(StrictSerializer):
    endpoints = serializers.DictField(
        child=EndpointSetSerializer(),
        help_text=f"Endpoint id ({_NAME_MESSAGE}) -> the endpoint; at most {MAX_ENDPOINTS}. "
        "Endpoints the topic has and this leaves out are removed.",
    )

    def validate_endpoints(self, value: dict[str, Any]) -> dict[str, Any]:
        if len(value) > MAX_ENDPOINTS:
            raise serializers.ValidationError(f"At most {MAX_ENDPOINTS} endpoints.")
        bad = {name: [_NAME_MESSAGE] for name in value if not re.match(contract.TOPIC_NAME, name)}
        if bad:
            raise serializers.ValidationError(bad)
        return value


class EndpointDisableSerializer(StrictSerializer):
    reason = StrictCharField(
        max_length=REASON_MAX_CHARS,
        required=False,
        allow_blank=True,
        help_text="Why, shown with the endpoint.",
    )


class EndpointSerializer(serializers.Serializer):
    id = serializers.CharField(source="name")
    url = serializers.CharField()
    method = serializers.ChoiceField(choices=list(rq.METHODS))
    headers = serializers.DictField(
        child=serializers.CharField(), help_text="Header names; every value reads ********."
    )
    format = serializers.ChoiceField(choices=list(rq.FORMATS))
    content_type = serializers.CharField(allow_null=True)
    timeout_seconds = serializers.IntegerField(allow_null=True)
    retry = RetryPolicySerializer(allow_null=True)
    flow_control_key = serializers.CharField(allow_null=True)
    delivery_key = serializers.CharField(
        help_text="The flow-control key its deliveries carry (paused while disabled)."
    )
    state = serializers.ChoiceField(choices=EndpointState.choices)
    disabled_at = AwareDateTimeField(allow_null=True)
    disabled_reason = serializers.CharField(allow_blank=True)
    failing_since = AwareDateTimeField(
        allow_null=True, help_text="Since when every delivery to it failed (null: it is not)."
    )
    created_at = AwareDateTimeField()
    updated_at = AwareDateTimeField()


def endpoint_body(topic: str, endpoint: TopicEndpoint) -> dict[str, Any]:
    public = request_public(endpoint.request)
    for name in ("on_success_url", "on_failure_url", "capture_response", "callbacks"):
        public.pop(name)
    data = {
        "name": endpoint.name,
        "url": endpoint.url,
        **public,
        "flow_control_key": endpoint.flow_control_key,
        "delivery_key": delivery_key(topic, endpoint.name, endpoint.flow_control_key),
        "state": endpoint.state,
        "disabled_at": endpoint.disabled_at,
        "disabled_reason": endpoint.disabled_reason,
        "failing_since": endpoint.failing_since,
        "created_at": endpoint.created_at,
        "updated_at": endpoint.updated_at,
    }
    return EndpointSerializer(data).data


class TopicSerializer(serializers.Serializer):
    name = serializers.CharField()
    endpoints = EndpointSerializer(many=True)
    created_at = AwareDateTimeField()
    updated_at = AwareDateTimeField()


class TopicPageSerializer(serializers.Serializer):
    results = TopicSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)
    next = serializers.CharField(allow_null=True, help_text="URL of the next page, or null.")


def topic_body(topic: Topic, endpoints: list[TopicEndpoint] | None = None) -> dict[str, Any]:
    """``TopicSerializer``'s shape; ``endpoints`` fetched already (else read here)."""
    rows = endpoints if endpoints is not None else list(topic.endpoints.order_by("name"))
    return {
        "name": topic.name,
        "endpoints": [endpoint_body(topic.name, e) for e in rows],
        "created_at": iso_utc(topic.created_at),
        "updated_at": iso_utc(topic.updated_at),
    }
