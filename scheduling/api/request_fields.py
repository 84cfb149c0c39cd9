"""The delivery contract's fields (issue 31), shared by jobs, bulk items and schedules.

``DeliveryContractFields`` declares them (its subclasses are the create serializers);
``delivery_request_from`` turns validated data into the service's DeliveryRequest; the
checks the fields cannot make alone (refused header names, the byte total, callback
URLs) are the service's (``scheduling.jobs.requests.RequestChecker``), with the same
field names in their 400s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.api import contract
from scheduling.api.fields import CallbackUrlField, StrictCharField, StrictIntegerField
from scheduling.jobs import requests as rq
from scheduling.jobs.requests import CONTRACT_FIELDS, DeliveryRequest, RetryPolicy, request_public

__all__ = ["CONTRACT_FIELDS", "DeliveryContractFields", "delivery_request_from"]


class StrictBooleanField(serializers.BooleanField):
    """true or false, nothing DRF would coerce ("true", 1)."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


@extend_schema_field(
    {
        "type": "object",
        "maxProperties": rq.MAX_HEADERS,
        "propertyNames": {"type": "string", "pattern": contract.header_name_pattern()},
        "additionalProperties": {
            "type": "string",
            "maxLength": rq.MAX_HEADER_VALUE_CHARS,
            "pattern": contract.HEADER_VALUE,
        },
    }
)
class HeadersField(serializers.DictField):
    """Header names to values: HTTP tokens, printable ASCII, refused names refused."""

    child = StrictCharField(
        max_length=rq.MAX_HEADER_VALUE_CHARS, allow_blank=True, trim_whitespace=False
    )

    def to_internal_value(self, data: Any) -> dict[str, str]:
        if isinstance(data, Mapping) and len(data) > rq.MAX_HEADERS:
            raise serializers.ValidationError(f"At most {rq.MAX_HEADERS} headers.")
        value = super().to_internal_value(data)
        errors: dict[str, list[str]] = {}
        for name, text in value.items():
            if not re.match(contract.header_name_pattern(), name):
                errors[name] = [
                    rq.header_refusal(name)
                    or "A header name must be an HTTP token of at most "
                    f"{rq.MAX_HEADER_NAME_CHARS} characters."
                ]
            elif not rq.HEADER_VALUE.fullmatch(text):
                errors[name] = ["A header value must be printable ASCII (no CR or LF)."]
        if errors:
            raise serializers.ValidationError(errors)
        return value


class RetryPolicySerializer(serializers.Serializer):
    max_attempts = StrictIntegerField(
        min_value=1,
        max_value=rq.MAX_ATTEMPTS_LIMIT,
        required=False,
        help_text="Tries in all, the first included (1: never retried).",
    )
    min_backoff_seconds = StrictIntegerField(
        min_value=1,
        max_value=rq.MAX_BACKOFF_LIMIT_SECONDS,
        required=False,
        help_text="The first retry's delay; each next one doubles (with jitter).",
    )
    max_backoff_seconds = StrictIntegerField(
        min_value=1,
        max_value=rq.MAX_BACKOFF_LIMIT_SECONDS,
        required=False,
        help_text="No delay longer than this. At least min_backoff_seconds.",
    )

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        low, high = attrs.get("min_backoff_seconds"), attrs.get("max_backoff_seconds")
        if low is not None and high is not None and low > high:
            raise serializers.ValidationError(
                {"max_backoff_seconds": ["Must be at least min_backoff_seconds."]}
            )
        return attrs


class DeliveryContractFields(serializers.Serializer):
    """What a job sends besides its payload, and what is heard after; every field
    optional, every default today's webhook (a signed JSON POST)."""

    method = serializers.ChoiceField(
        choices=list(rq.METHODS),
        required=False,
        help_text="HTTP method. GET and DELETE send no body. Default POST. (This and the "
        "fields to timeout_seconds shape webhooks; a handler job ignores them.)",
    )
    headers = HeadersField(
        required=False,
        help_text=(
            f"Sent with every delivery (webhooks): up to {rq.MAX_HEADERS}, "
            f"{rq.MAX_HEADER_BYTES} bytes in all. Kept encrypted; read back masked. "
            "Hop-by-hop headers, Host, Content-Length, Content-Type, Expect and webhook-* "
            "are refused."
        ),
    )
    format = serializers.ChoiceField(
        choices=list(rq.FORMATS),
        required=False,
        help_text=(
            "envelope (default): the signed JSON envelope {id, due_at, payload, attempt, "
            "metadata}. payload: the payload alone, a JSON value as JSON, a string as is."
        ),
    )
    content_type = StrictCharField(
        max_length=rq.MAX_CONTENT_TYPE_CHARS,
        required=False,
        allow_null=True,
        help_text=(
            "The Content-Type of format payload (give both in one body; a GET or DELETE "
            "sends none). Default application/json, text/plain; charset=utf-8 for a string "
            "payload."
        ),
    )
    timeout_seconds = StrictIntegerField(
        min_value=rq.TIMEOUT_MIN_SECONDS,
        max_value=rq.TIMEOUT_MAX_SECONDS,
        required=False,
        allow_null=True,
        help_text="The whole request's limit (connect, send, wait, read). Default: the service's.",
    )
    retry = RetryPolicySerializer(
        required=False,
        allow_null=True,
        help_text="This job's retry policy; what it leaves out is the team's default, "
        "then the service's.",
    )
    on_success_url = CallbackUrlField(
        max_length=2048,
        required=False,
        allow_null=True,
        help_text="Told (a signed POST of a job.delivered event) when the job is delivered.",
    )
    on_failure_url = CallbackUrlField(
        max_length=2048,
        required=False,
        allow_null=True,
        help_text="Told (job.dead, job.expired) when the job ends dead or expired. "
        "Default: the team's default_on_failure_url.",
    )
    capture_response = StrictBooleanField(
        required=False, help_text="Keep the successful response's excerpt on the job."
    )

    def validate_content_type(self, value: str | None) -> str | None:
        if value is not None and not re.match(contract.CONTENT_TYPE, value):
            raise serializers.ValidationError(
                "Must be a media type such as text/csv or application/json; charset=utf-8."
            )
        return value


def contract_cross_check(attrs: Mapping[str, Any]) -> None:
    """The one rule between fields the schema states (if/then): content_type comes with
    format payload in the same body."""
    if attrs.get("content_type") is not None and attrs.get("format") != "payload":
        raise serializers.ValidationError(
            {"content_type": ["Give it with format 'payload' (the envelope is JSON)."]}
        )


def delivery_request_from(data: Mapping[str, Any]) -> DeliveryRequest | None:
    """Validated create data -> the service's DeliveryRequest (None: none given)."""
    if not any(name in data for name in CONTRACT_FIELDS):
        return None
    retry = data.get("retry")
    return DeliveryRequest(
        method=data.get("method", "POST"),
        headers=dict(data.get("headers") or {}),
        format=data.get("format", "envelope"),
        content_type=data.get("content_type"),
        timeout_seconds=data.get("timeout_seconds"),
        retry=RetryPolicy(**retry) if retry else None,
        on_success_url=data.get("on_success_url"),
        on_failure_url=data.get("on_failure_url"),
        capture_response=data.get("capture_response", False),
    )


class ContractView:
    """A job or schedule read with its delivery contract's public fields as attributes
    (what the output serializers show: header values masked)."""

    def __init__(self, row: Any) -> None:
        self.__dict__.update(request_public(row.request))
        self._row = row

    def __getattr__(self, name: str) -> Any:
        return getattr(self._row, name)
