"""Response shapes of the jobs API: a job's public body (``job_body``), pages, bulk
and cancel results, delivery attempts."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.api.fields import (
    AwareDateTimeField,
)
from scheduling.api.request_fields import (
    ContractView,
    RetryPolicySerializer,
)
from scheduling.jobs import requests as rq
from scheduling.jobs.requests import request_public
from scheduling.jobs.selectors import job_status_public, topic_deliveries
from scheduling.models import Job, JobStatus, TargetKind
from scheduling.sharding.clock import iso_utc


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
