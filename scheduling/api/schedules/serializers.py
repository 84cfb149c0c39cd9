"""Request and response shapes of the recurring-schedules API. Validation only."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.api import contract
from scheduling.api.fields import (
    AwareDateTimeField,
    CallbackUrlField,
    FlowControlKeyField,
    StrictCharField,
    StrictIntegerField,
    TopicNameField,
)
from scheduling.api.jobs.serializers import (
    MAX_WINDOW_SECONDS,
    TARGET_FIELDS,
    MetadataField,
    QuerySerializer,
    StrictSerializer,
    cursor_checked,
    target_field,
    target_of,
    targets_check,
)
from scheduling.api.request_fields import (
    CONTRACT_FIELDS,
    ContractView,
    DeliveryContractFields,
    RetryPolicySerializer,
    contract_cross_check,
    delivery_request_from,
)
from scheduling.jobs import requests as rq
from scheduling.models import MissedPolicy, Schedule, TargetKind
from scheduling.schedules.services import MAX_PREVIEW, ScheduleSpec, recurrence

MAX_CRON_CHARS = 200
MAX_EVERY_SECONDS = 366 * 86_400  # a year: longer intervals are a one-shot job
DEFAULT_PREVIEW = 10


@functools.cache
def timezone_choices() -> list[str]:
    return sorted(recurrence.timezone_names())


class TimezoneField(serializers.ChoiceField):
    """An IANA time zone name (the schema lists them; the error names the field)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=timezone_choices(), **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid_choice", input=data)
        if data not in self.choices:
            raise serializers.ValidationError(
                f"unknown time zone {data[:80]!r} (an IANA name such as Europe/London)."
            )
        return data


def _cron_field(**kwargs: Any) -> StrictCharField:
    return StrictCharField(
        max_length=MAX_CRON_CHARS,
        help_text=(
            "5 fields, local time in `timezone`: minute hour day-of-month month "
            "day-of-week; lists, ranges, steps and names in any case (`0 9 * * MON-FRI`, "
            "`0 9 * * mon-fri`). A day of month must occur in a listed month "
            "(`0 9 31 1,3,5 *`; `0 9 31 4 *` is refused). Give this or every_seconds."
        ),
        **kwargs,
    )


def _every_field(**kwargs: Any) -> StrictIntegerField:
    return StrictIntegerField(
        min_value=recurrence.MIN_EVERY_SECONDS,
        max_value=MAX_EVERY_SECONDS,
        help_text="Fire every this many real seconds from start_at (or creation). Or cron.",
        **kwargs,
    )


class _ScheduleFields(StrictSerializer, DeliveryContractFields):
    timezone = TimezoneField(
        required=False, help_text="IANA time zone of the cron expression. Default UTC."
    )
    callback_url = CallbackUrlField(
        max_length=2048, required=False, help_text="http(s) URL to POST to. Give this or handler."
    )
    handler = StrictCharField(
        max_length=200, required=False, help_text="A registered handler name. Or callback_url."
    )
    topic = TopicNameField(
        required=False,
        help_text="A topic of the team: each occurrence goes to every endpoint enabled at "
        "its due time. Or callback_url, or handler.",
    )
    payload = serializers.JSONField(
        required=False, help_text="Any JSON value but null; each occurrence delivers it."
    )
    metadata = MetadataField(required=False, help_text="Labels copied to every occurrence.")
    window_seconds = StrictIntegerField(
        min_value=0,
        max_value=MAX_WINDOW_SECONDS,
        required=False,
        help_text="Spread each occurrence within [instant, instant + window].",
    )
    expires_after_seconds = StrictIntegerField(
        min_value=0,
        max_value=settings.SENDLATER_MAX_HORIZON_DAYS * 86_400,
        required=False,
        allow_null=True,
        help_text="An occurrence not delivered by its instant + this ends as expired.",
    )
    start_at = AwareDateTimeField(
        required=False, allow_null=True, help_text="No instant before this (inclusive)."
    )
    end_at = AwareDateTimeField(
        required=False,
        allow_null=True,
        help_text="No instant after this (inclusive). Must be after start_at (the one given, "
        "or on a PATCH the schedule's): otherwise a 400 naming end_at.",
    )
    missed = serializers.ChoiceField(
        choices=MissedPolicy.choices,
        required=False,
        help_text="Occurrences missed (paused, outage, past start_at): skip them, or fire "
        "the most recent once.",
    )
    flow_control_key = FlowControlKeyField(
        required=False,
        allow_null=True,
        help_text="Copied to every occurrence: its jobs obey this key's limits (null: none).",
    )

    def _check_target(self, attrs: dict[str, Any], required: bool) -> None:
        targets_check(attrs, required=required)
        contract_cross_check(attrs)

    def validate_payload(self, value: Any) -> Any:
        if value is None:
            raise serializers.ValidationError("payload must not be null.")
        return value

    def validate_cron(self, value: str) -> str:
        if not re.match(contract.cron_pattern(), value):
            raise serializers.ValidationError(
                "cron must be 5 fields (minute hour day-of-month month day-of-week) of *, "
                "numbers, ascending ranges, steps and lists; names in any case (MON-FRI, "
                "mon-fri, JAN); a day of month no listed month has (31 with APR, 30 with "
                "FEB) only beside a weekday list that does not start with *."
            )
        try:
            recurrence.validate_cron(value)
        except recurrence.RecurrenceError as error:
            raise serializers.ValidationError(error.message) from error
        return value


class ScheduleCreateSerializer(_ScheduleFields):
    cron = _cron_field(required=False)
    every_seconds = _every_field(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        rules = [name for name in ("cron", "every_seconds") if name in attrs]
        if len(rules) != 1:
            message = "Give exactly one of cron and every_seconds."
            raise serializers.ValidationError({name: [message] for name in rules or ["cron"]})
        self._check_target(attrs, required=True)
        return attrs


class ScheduleUpdateSerializer(_ScheduleFields):
    """Every field optional; a new cron replaces every_seconds and the other way round."""

    cron = _cron_field(required=False)
    every_seconds = _every_field(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        both = [name for name in ("cron", "every_seconds") if name in attrs]
        if len(both) > 1:
            message = "Give only one of cron and every_seconds."
            raise serializers.ValidationError({name: [message] for name in both})
        self._check_target(attrs, required=False)
        return attrs


def _target(data: Mapping[str, Any]) -> dict[str, Any]:
    given = target_of(data)
    return {} if given is None else {"target_kind": given[0], "target": given[1]}


def schedule_spec_from(data: Mapping[str, Any], trace_context: str | None = None) -> ScheduleSpec:
    """Validated create data -> the service's ScheduleSpec; ``trace_context`` is the
    request's (``scheduling.tracing.context_of_request``)."""
    target = _target(data)
    return ScheduleSpec(
        target_kind=target["target_kind"],
        target=target["target"],
        cron=data.get("cron"),
        every_seconds=data.get("every_seconds"),
        timezone=data.get("timezone", "UTC"),
        payload=data.get("payload", {}),
        metadata=data.get("metadata", {}),
        window_seconds=data.get("window_seconds", 0),
        expires_after_seconds=data.get("expires_after_seconds"),
        start_at=data.get("start_at"),
        end_at=data.get("end_at"),
        missed=data.get("missed", MissedPolicy.SKIP),
        flow_control_key=data.get("flow_control_key"),
        request=delivery_request_from(data),
        trace_context=trace_context,
    )


def schedule_changes_from(data: Mapping[str, Any]) -> dict[str, Any]:
    """Validated PATCH data -> the service's ``changes``."""
    changes = {k: v for k, v in data.items() if k not in (*TARGET_FIELDS, *CONTRACT_FIELDS)}
    changes.update(_target(data))
    contract = {name: data[name] for name in CONTRACT_FIELDS if name in data}
    if contract:
        changes["request"] = contract
    return changes


class ScheduleSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    cron = serializers.CharField(allow_null=True)
    every_seconds = serializers.IntegerField(allow_null=True)
    timezone = serializers.CharField()
    callback_url = serializers.SerializerMethodField()
    handler = serializers.SerializerMethodField()
    topic = serializers.SerializerMethodField()
    payload = serializers.JSONField()
    metadata = serializers.DictField(child=serializers.CharField())
    window_seconds = serializers.IntegerField()
    expires_after_seconds = serializers.IntegerField(allow_null=True)
    start_at = AwareDateTimeField(allow_null=True)
    end_at = AwareDateTimeField(allow_null=True)
    missed = serializers.ChoiceField(choices=MissedPolicy.choices)
    flow_control_key = serializers.CharField(allow_null=True)
    # The delivery contract copied to every occurrence: header values masked.
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
    paused = serializers.BooleanField()
    next_occurrences = serializers.ListField(
        child=AwareDateTimeField(),
        help_text="The next five instants (UTC) from now; empty after end_at.",
    )
    created_at = AwareDateTimeField()
    updated_at = AwareDateTimeField()

    def to_representation(self, instance: Schedule) -> dict[str, Any]:
        return super().to_representation(ContractView(instance))

    @extend_schema_field({"type": ["string", "null"], "format": "uri"})
    def get_callback_url(self, schedule: Schedule) -> str | None:
        return schedule.target if schedule.target_kind == TargetKind.WEBHOOK else None

    @extend_schema_field({"type": ["string", "null"]})
    def get_handler(self, schedule: Schedule) -> str | None:
        return schedule.target if schedule.target_kind == TargetKind.HANDLER else None

    @extend_schema_field({"type": ["string", "null"]})
    def get_topic(self, schedule: Schedule) -> str | None:
        return schedule.target if schedule.target_kind == TargetKind.TOPIC else None


class SchedulePageSerializer(serializers.Serializer):
    results = ScheduleSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)
    next = serializers.CharField(allow_null=True, help_text="URL of the next page, or null.")


class ScheduleListQuerySerializer(QuerySerializer):
    cursor = serializers.CharField(required=False, help_text="next_cursor of the previous page.")
    limit = serializers.IntegerField(min_value=1, max_value=1000, required=False)

    def validate_cursor(self, value: str) -> str:
        return cursor_checked(value)


class OccurrencesQuerySerializer(QuerySerializer):
    count = serializers.IntegerField(
        min_value=1, max_value=MAX_PREVIEW, required=False, help_text="How many (default 10)."
    )


class OccurrencesSerializer(serializers.Serializer):
    occurrences = serializers.ListField(child=AwareDateTimeField())


__all__ = ["DEFAULT_PREVIEW", "target_field"]
