"""Request shapes of the jobs API (validation only: no writes here); the responses are in
``scheduling.api.jobs.bodies``."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import serializers

from scheduling.api import contract
from scheduling.api.fields import (
    AwareDateTimeField,
    CallbackUrlField,
    DueAtField,
    FlowControlKeyField,
    StrictCharField,
    StrictIntegerField,
    TopicNameField,
)
from scheduling.api.request_fields import (
    DeliveryContractFields,
    contract_cross_check,
    delivery_request_from,
)
from scheduling.jobs.specs import JobSpec
from scheduling.models import JobStatus, TargetKind

MAX_BULK_JOBS = 1000
MAX_WINDOW_SECONDS = 86_400  # a day: wider windows are a different due time, not a window
MAX_METADATA_ENTRIES = 32
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know: a typo must not be dropped silently."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class QuerySerializer(StrictSerializer):
    """Query parameters read as plain values: DRF treats ``?cursor=`` as absent, but the
    schema says an empty value is not a cursor, so it must be refused."""

    def to_internal_value(self, data: Any) -> Any:
        if hasattr(data, "getlist"):
            lists = {n for n, f in self.fields.items() if isinstance(f, serializers.ListField)}
            data = {key: data.getlist(key) if key in lists else data[key] for key in data}
        return super().to_internal_value(data)


class StrictUUIDField(serializers.UUIDField):
    def to_internal_value(self, data: Any) -> uuid.UUID:
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


class MetadataField(serializers.DictField):
    """String keys to string values, small: labels to find and cancel jobs by."""

    child = StrictCharField(
        max_length=MAX_METADATA_VALUE_CHARS, allow_blank=True, trim_whitespace=False
    )

    def to_internal_value(self, data: Any) -> dict[str, str]:
        value = super().to_internal_value(data)
        if len(value) > MAX_METADATA_ENTRIES:
            raise serializers.ValidationError(f"At most {MAX_METADATA_ENTRIES} entries.")
        for key in value:
            if not key or len(key) > MAX_METADATA_KEY_CHARS or "\x00" in key:
                raise serializers.ValidationError(
                    f"Keys must be 1 to {MAX_METADATA_KEY_CHARS} characters."
                )
        return value


def _not_null(value: Any) -> Any:
    if value is None:
        raise serializers.ValidationError("payload must not be null.")
    return value


class JobCreateSerializer(StrictSerializer, DeliveryContractFields):
    due_at = DueAtField(help_text="When to deliver: ISO 8601 with a UTC offset.")
    payload = serializers.JSONField(
        required=False, help_text="Any JSON value but null; delivered as is. Default {}."
    )
    callback_url = CallbackUrlField(
        max_length=2048, required=False, help_text="http(s) URL to POST to. Give this or handler."
    )
    handler = StrictCharField(
        max_length=200, required=False, help_text="A registered handler name. Or callback_url."
    )
    topic = TopicNameField(
        required=False,
        help_text="A topic of the team (PUT /api/v1/topics/{name}): at the due time each "
        "endpoint enabled then gets a delivery of its own. Or callback_url, or handler.",
    )
    idempotency_key = StrictCharField(
        max_length=255,
        required=False,
        help_text="Same key and body again: 200 with the existing job. Other body: 409.",
    )
    metadata = MetadataField(required=False, help_text="Labels to filter and bulk-cancel by.")
    window_seconds = StrictIntegerField(
        min_value=0,
        max_value=MAX_WINDOW_SECONDS,
        required=False,
        help_text="Spread delivery deterministically within [due_at, due_at + window].",
    )
    expires_after_seconds = StrictIntegerField(
        min_value=0,
        max_value=settings.SENDLATER_MAX_HORIZON_DAYS * 86_400,
        required=False,
        allow_null=True,
        help_text="Not delivered by due_at + this: the job ends as expired, never late.",
    )
    flow_control_key = FlowControlKeyField(
        required=False,
        allow_null=True,
        help_text="Obey this key's rate and parallelism limits (PUT /api/v1/flow-controls/{key}).",
    )

    def validate_payload(self, value: Any) -> Any:
        return _not_null(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        targets_check(attrs, required=True)
        contract_cross_check(attrs)
        return attrs


# The request fields that name a job's target, one of them given; by target kind.
TARGET_FIELDS = ("callback_url", "handler", "topic")
_KIND_OF_FIELD = {
    "callback_url": TargetKind.WEBHOOK,
    "handler": TargetKind.HANDLER,
    "topic": TargetKind.TOPIC,
}


def target_of(data: Mapping[str, Any]) -> tuple[str, str] | None:
    """(target kind, target) of validated data naming one, else None."""
    for name in TARGET_FIELDS:
        if name in data:
            return _KIND_OF_FIELD[name], data[name]
    return None


def targets_check(attrs: Mapping[str, Any], *, required: bool) -> None:
    """Exactly one target field (at most one where not ``required``: a PATCH)."""
    given = [name for name in TARGET_FIELDS if name in attrs]
    if required and not given:
        raise serializers.ValidationError("Give callback_url, handler or topic.")
    if len(given) > 1:
        message = "Give only one of callback_url, handler and topic."
        raise serializers.ValidationError({name: [message] for name in given})


def target_field(data: Mapping[str, Any]) -> str:
    """The request field that named the target: ``callback_url``, ``handler`` or ``topic``."""
    if "handler" in data:
        return "handler"
    return "topic" if "topic" in data else "callback_url"


def job_spec_from(data: Mapping[str, Any], trace_context: str | None = None) -> JobSpec:
    """Turn validated create data into the service's JobSpec; ``trace_context`` is the
    request's (``scheduling.tracing.context_of_request``)."""
    kind, target = target_of(data) or (TargetKind.WEBHOOK, data["callback_url"])
    return JobSpec(
        due_at=data["due_at"],
        target_kind=kind,
        target=target,
        payload=data.get("payload", {}),
        metadata=data.get("metadata", {}),
        idempotency_key=data.get("idempotency_key"),
        window_seconds=data.get("window_seconds", 0),
        expires_after_seconds=data.get("expires_after_seconds"),
        flow_control_key=data.get("flow_control_key"),
        request=delivery_request_from(data),
        trace_context=trace_context,
    )


class JobBulkCreateSerializer(StrictSerializer):
    jobs = JobCreateSerializer(many=True, allow_empty=False, max_length=MAX_BULK_JOBS)


class JobRescheduleSerializer(StrictSerializer):
    due_at = DueAtField(help_text="The new due time.")
    payload = serializers.JSONField(required=False, help_text="Replaces the payload if given.")

    def validate_payload(self, value: Any) -> Any:
        return _not_null(value)


class JobCancelManySerializer(StrictSerializer):
    ids = serializers.ListField(
        child=StrictUUIDField(), required=False, max_length=MAX_BULK_JOBS, allow_empty=False
    )
    metadata = MetadataField(required=False, allow_empty=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError({"ids": ["Give ids, metadata, or both."]})
        return attrs


class JobListQuerySerializer(QuerySerializer):
    status = serializers.ChoiceField(choices=JobStatus.choices, required=False)
    due_after = AwareDateTimeField(required=False, help_text="due_at at or after this.")
    due_before = AwareDateTimeField(required=False, help_text="due_at before this.")
    metadata = serializers.ListField(
        child=StrictCharField(),
        required=False,
        max_length=MAX_METADATA_ENTRIES,
        help_text="key=value; repeat for several (all must match).",
    )
    schedule_id = serializers.UUIDField(
        required=False, help_text="Only occurrences of this recurring schedule."
    )
    flow_control_key = FlowControlKeyField(required=False, help_text="Only jobs of this key.")
    cursor = serializers.CharField(required=False, help_text="next_cursor of the previous page.")
    limit = serializers.IntegerField(min_value=1, max_value=MAX_BULK_JOBS, required=False)

    def validate_cursor(self, value: str) -> str:
        return cursor_checked(value)

    def validate_metadata(self, value: list[str]) -> dict[str, str]:
        pairs: dict[str, str] = {}
        for item in value:
            if not re.match(contract.METADATA_FILTER, item):
                raise serializers.ValidationError(
                    f"Use key=value (key 1 to {MAX_METADATA_KEY_CHARS} characters without '=',"
                    f" value up to {MAX_METADATA_VALUE_CHARS})."
                )
            key, _, val = item.partition("=")
            pairs[key] = val
        return pairs


def cursor_checked(value: str) -> str:
    if not re.match(contract.CURSOR, value):
        raise serializers.ValidationError("Invalid cursor.")
    return value
