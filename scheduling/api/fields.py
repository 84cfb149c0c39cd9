"""Strict serializer fields: no silent coercion of wrong types, no naive datetimes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime
from rest_framework import serializers

from scheduling.clock import iso_utc


class StrictCharField(serializers.CharField):
    """A string, and only a string (DRF's CharField turns 12 into "12")."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer (not "12", 12.5 or true)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class AwareDateTimeField(serializers.DateTimeField):
    """ISO 8601 with a UTC offset, returned in UTC; naive times are refused, not guessed."""

    default_error_messages = {
        "invalid": "Datetime must be ISO 8601 with a UTC offset, e.g. 2027-03-01T09:00:00Z.",
        "naive": "Datetime has no UTC offset; add one, e.g. 2027-03-01T09:00:00+01:00 or Z.",
        "range": "Datetime is out of range.",
    }

    def to_internal_value(self, value: Any) -> datetime:
        if not isinstance(value, str):
            self.fail("invalid")
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:
            parsed = None
        if parsed is None:
            self.fail("invalid")
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            self.fail("naive")
        try:
            return parsed.astimezone(UTC)
        except (OverflowError, ValueError):
            self.fail("range")

    def to_representation(self, value: datetime | None) -> str | None:
        if value is None:
            return None
        return iso_utc(value)
