"""Request and response shapes of the scheduling API. Validation only: no writes here."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
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
    ContractView,
    DeliveryContractFields,
    RetryPolicySerializer,
    contract_cross_check,
    delivery_request_from,
)
from scheduling.jobs import requests as rq
from scheduling.jobs.requests import request_public
from scheduling.jobs.selectors import job_status_public, topic_deliveries
from scheduling.jobs.specs import JobSpec
from scheduling.models import Job, JobStatus, TargetKind
from scheduling.sharding.clock import iso_utc

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


class KeptResponseSerializer(serializers.Serializer):
    status_code = serializers.IntegerField()
    content_type = serializers.CharField(allow_null=True)
    body_excerpt = serializers.CharField(allow_blank=True, help_text="At most 1,024 characters.")
    duration_ms = serializers.IntegerField(allow_null=True)


class TopicDeliverySerializer(serializers.Serializer):
    endpoint = serializers.CharField(help_text="The endpoint's id.")
    job_id = serializers.UUIDField(help_text="The delivery's own job (GET /api/v1/jobs/{id}).")
    status = serializers.ChoiceField(
        choices=JobStatus.choices, allow_null=True, help_text="null: pruned by retention."
    )
    attempts = serializers.IntegerField()
    last_error = serializers.CharField(allow_blank=True)
    delivered_at = AwareDateTimeField(allow_null=True)


class JobSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=JobStatus.choices)
    due_at = AwareDateTimeField(help_text="Effective due time (inside the window, if any).")
    bucket = AwareDateTimeField(help_text="Start of the bucket the job is stored in.")
    shard = serializers.IntegerField()
    attempts = serializers.IntegerField()
    callback_url = serializers.SerializerMethodField()
    handler = serializers.SerializerMethodField()
    topic = serializers.SerializerMethodField()
    deliveries = TopicDeliverySerializer(
        many=True,
        allow_null=True,
        help_text="A fanned-out topic job's delivery to each endpoint (null: none yet, or "
        "not a topic job). The job reads delivered once every one is.",
    )
    payload = serializers.JSONField()
    metadata = serializers.DictField(child=serializers.CharField())
    idempotency_key = serializers.CharField(allow_null=True)
    window_seconds = serializers.IntegerField()
    expires_at = AwareDateTimeField(allow_null=True)
    delivered_at = AwareDateTimeField(allow_null=True)
    last_error = serializers.CharField(allow_blank=True)
    created_at = AwareDateTimeField()
    updated_at = AwareDateTimeField()
    schedule_id = serializers.UUIDField(
        allow_null=True, help_text="The recurring schedule this job is an occurrence of."
    )
    scheduled_for = AwareDateTimeField(
        allow_null=True, help_text="The occurrence's instant (due_at may be later: the window)."
    )
    flow_control_key = serializers.CharField(
        allow_null=True, help_text="The flow-control key whose limits the job obeys."
    )
    # The delivery contract (scheduling.jobs.requests.request_public): header values masked.
    method = serializers.ChoiceField(choices=list(rq.METHODS))
    headers = serializers.DictField(
        child=serializers.CharField(), help_text="Header names; every value reads ********."
    )
    format = serializers.ChoiceField(choices=list(rq.FORMATS))
    content_type = serializers.CharField(allow_null=True)
    timeout_seconds = serializers.IntegerField(allow_null=True)
    retry = RetryPolicySerializer(allow_null=True)
    on_success_url = serializers.CharField(allow_null=True)
    on_failure_url = serializers.CharField(allow_null=True)
    capture_response = serializers.BooleanField()
    callbacks = serializers.DictField(
        child=serializers.UUIDField(),
        help_text="The callback jobs this job's outcome made: event (job.delivered, "
        "job.dead, job.expired) -> the callback's job id.",
    )
    response = KeptResponseSerializer(
        allow_null=True, help_text="The successful response, kept where capture_response asked."
    )

    def to_representation(self, instance: Job) -> dict[str, Any]:
        view = ContractView(instance)
        view.deliveries = topic_deliveries(instance)
        view.status = job_status_public(instance, view.deliveries)
        return super().to_representation(view)

    @extend_schema_field({"type": ["string", "null"], "format": "uri"})
    def get_callback_url(self, job: Job) -> str | None:
        return job.target if job.target_kind == TargetKind.WEBHOOK else None

    @extend_schema_field({"type": ["string", "null"]})
    def get_handler(self, job: Job) -> str | None:
        return job.target if job.target_kind == TargetKind.HANDLER else None

    @extend_schema_field({"type": ["string", "null"]})
    def get_topic(self, job: Job) -> str | None:
        return job.target if job.target_kind == TargetKind.TOPIC else None


def job_body(job: Job) -> dict[str, Any]:
    """``JobSerializer(job).data``, built directly.

    The same keys and values (tests/api/test_job_body.py holds the two side by side)
    without DRF's per-request copy of 20 field objects and a call per field: about a
    tenth of a single-job request's Python time.
    """
    target = job.target
    kind = job.target_kind
    deliveries = None if kind != TargetKind.TOPIC else _deliveries_body(topic_deliveries(job))
    return {
        "id": str(job.id),
        "status": str(job.status) if deliveries is None else job_status_public(job, deliveries),
        "due_at": iso_utc(job.due_at),
        "bucket": iso_utc(job.bucket),
        "shard": int(job.shard),
        "attempts": int(job.attempts),
        "callback_url": target if kind == TargetKind.WEBHOOK else None,
        "handler": target if kind == TargetKind.HANDLER else None,
        "topic": target if kind == TargetKind.TOPIC else None,
        "deliveries": deliveries,
        "payload": job.payload,
        "metadata": {
            str(key): None if value is None else str(value) for key, value in job.metadata.items()
        },
        "idempotency_key": None if job.idempotency_key is None else str(job.idempotency_key),
        "window_seconds": int(job.window_seconds),
        "expires_at": None if job.expires_at is None else iso_utc(job.expires_at),
        "delivered_at": None if job.delivered_at is None else iso_utc(job.delivered_at),
        "last_error": str(job.last_error),
        "created_at": iso_utc(job.created_at),
        "updated_at": iso_utc(job.updated_at),
        "schedule_id": None if job.schedule_id is None else str(job.schedule_id),
        "scheduled_for": None if job.scheduled_for is None else iso_utc(job.scheduled_for),
        "flow_control_key": job.flow_control_key,
        **request_public(job.request),
        "response": job.response,
    }


def _deliveries_body(deliveries: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    if deliveries is None:
        return None
    return [
        {**d, "delivered_at": None if d["delivered_at"] is None else iso_utc(d["delivered_at"])}
        for d in deliveries
    ]


class JobSummarySerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=JobStatus.choices)
    due_at = AwareDateTimeField()
    bucket = AwareDateTimeField()
    shard = serializers.IntegerField()
    created = serializers.BooleanField(help_text="False for an idempotent replay.")


class JobBulkResultSerializer(serializers.Serializer):
    jobs = JobSummarySerializer(many=True)


class JobPageSerializer(serializers.Serializer):
    results = JobSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)
    next = serializers.CharField(allow_null=True, help_text="URL of the next page, or null.")


class JobCancelManyResultSerializer(serializers.Serializer):
    canceled = serializers.IntegerField(help_text="How many pending jobs were canceled.")


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), required=False
    )


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


class DeliveryAttemptSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(help_text="1 for the first try of an attempt series.")
    started_at = AwareDateTimeField()
    duration_ms = serializers.IntegerField(allow_null=True)
    result = serializers.ChoiceField(choices=["delivered", "retry", "dead", "expired"])
    status_code = serializers.IntegerField(
        allow_null=True, help_text="HTTP status of a webhook delivery."
    )
    error = serializers.CharField(allow_blank=True, help_text="Error class or response excerpt.")


class DeliveryAttemptListSerializer(serializers.Serializer):
    attempts = DeliveryAttemptSerializer(many=True)
