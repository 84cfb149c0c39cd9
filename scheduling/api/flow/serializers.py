"""Request and response shapes of the flow-control API. Validation only: no writes here."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers

from scheduling.api import contract
from scheduling.api.fields import AwareDateTimeField, FlowControlKeyField, StrictIntegerField
from scheduling.api.jobs.serializers import QuerySerializer, StrictSerializer
from scheduling.flow.services import (
    PARALLELISM_MAX,
    PERIOD_MAX_SECONDS,
    PERIOD_MIN_SECONDS,
    RATE_MAX,
)

DEFAULT_PERIOD_SECONDS = 1


class FlowControlKeySerializer(StrictSerializer):
    """The ``{key}`` of the path: an over-long key is a 400 naming ``key``, not a 404."""

    key = FlowControlKeyField()


class FlowControlLimitsSerializer(StrictSerializer):
    rate = StrictIntegerField(
        min_value=1,
        max_value=RATE_MAX,
        required=False,
        help_text="Deliveries started per period_seconds, across all pollers. Omit: no rate.",
    )
    period_seconds = StrictIntegerField(
        min_value=PERIOD_MIN_SECONDS,
        max_value=PERIOD_MAX_SECONDS,
        required=False,
        help_text="The rate's period, 1 second to a day. Default 1.",
    )
    parallelism = StrictIntegerField(
        min_value=1,
        max_value=PARALLELISM_MAX,
        required=False,
        help_text="Deliveries in flight at once, across all pollers. Omit: unbounded.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "rate" not in attrs and "parallelism" not in attrs:
            message = "Give rate, parallelism or both."
            raise serializers.ValidationError({"rate": [message], "parallelism": [message]})
        attrs.setdefault("period_seconds", DEFAULT_PERIOD_SECONDS)
        attrs.setdefault("rate", None)
        attrs.setdefault("parallelism", None)
        return attrs


class FlowControlSerializer(serializers.Serializer):
    """A ``FlowState``: the key's limits and its live state."""

    key = serializers.CharField(source="flow.key")
    rate = serializers.IntegerField(
        source="flow.rate", allow_null=True, help_text="Deliveries per period (null: no rate)."
    )
    period_seconds = serializers.IntegerField(source="flow.period_seconds")
    parallelism = serializers.IntegerField(
        source="flow.parallelism",
        allow_null=True,
        help_text="Deliveries in flight at once (null: unbounded).",
    )
    paused = serializers.BooleanField(
        source="flow.paused", help_text="A paused key's jobs stay pending until resumed."
    )
    waiting = serializers.IntegerField(help_text="Due jobs held back by the key.")
    in_flight = serializers.IntegerField(help_text="Deliveries in flight across all pollers.")
    delivered_in_period = serializers.IntegerField(
        help_text="Deliveries started in the current period."
    )
    created_at = AwareDateTimeField(source="flow.created_at")
    updated_at = AwareDateTimeField(source="flow.updated_at")


class FlowControlPageSerializer(serializers.Serializer):
    results = FlowControlSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)
    next = serializers.CharField(allow_null=True, help_text="URL of the next page, or null.")


class FlowControlListQuerySerializer(QuerySerializer):
    cursor = serializers.CharField(required=False, help_text="next_cursor of the previous page.")
    limit = serializers.IntegerField(min_value=1, max_value=1000, required=False)

    def validate_cursor(self, value: str) -> str:
        if not re.match(contract.FLOW_CONTROL_CURSOR, value):
            raise serializers.ValidationError("Invalid cursor.")
        return value
