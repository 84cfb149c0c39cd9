"""Strict serializer fields: no silent coercion of wrong types, no naive datetimes."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework import serializers

from scheduling import conf, netguard
from scheduling.api import contract
from scheduling.flow.services import KEY_FORBIDDEN_CHARS, KEY_MAX_CHARS
from scheduling.sharding.clock import iso_utc
from scheduling.topics.models import NAME_MAX_CHARS


class StrictCharField(serializers.CharField):
    """A string, and only a string (DRF's CharField turns 12 into "12"), kept as sent:
    the schema cannot say "trimmed", so " " is a one-character string, not a blank one."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer (not "12", 12.5 or true). 12.0 is one: JSON Schema's "integer"
    is any number with a zero fractional part, and clients may send it so."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, float) and data.is_integer():
            data = int(data)
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class FlowControlKeyField(StrictCharField):
    """A flow-control key (``contract.FLOW_CONTROL_KEY``): 1 to 100 characters, no "/"."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", KEY_MAX_CHARS)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        key = super().to_internal_value(data)
        if any(char in key for char in KEY_FORBIDDEN_CHARS):
            raise serializers.ValidationError("Must not contain '/' or NUL characters.")
        return key


class TopicNameField(StrictCharField):
    """A topic's name or an endpoint's id (``contract.TOPIC_NAME``)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", NAME_MAX_CHARS)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        name = super().to_internal_value(data)
        if not re.match(contract.TOPIC_NAME, name):
            raise serializers.ValidationError(
                f"1 to {NAME_MAX_CHARS} letters, digits, '.', '_' or '-'."
            )
        return name


class AwareDateTimeField(serializers.DateTimeField):
    """ISO 8601 with a UTC offset, returned in UTC; naive times are refused, not guessed."""

    default_error_messages = {
        "invalid": (
            "Datetime must be RFC 3339 with a UTC offset, from 1970, e.g. 2027-03-01T09:00:00Z."
        ),
        "naive": "Datetime has no UTC offset; add one, e.g. 2027-03-01T09:00:00+01:00 or Z.",
        "range": "Datetime is out of range.",
    }

    def to_internal_value(self, value: Any) -> datetime:
        # The schema's pattern (contract.DATETIME), not every spelling parse_datetime takes.
        if not isinstance(value, str) or not re.match(contract.DATETIME, value):
            if isinstance(value, str) and _is_naive(value):
                self.fail("naive")
            self.fail("invalid")
        try:
            parsed = parse_datetime(value)
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


def _is_naive(value: str) -> bool:
    """A valid date and time without an offset (the error can say what to add)."""
    try:
        parsed = parse_datetime(value)
    except ValueError:
        return False
    return parsed is not None and parsed.tzinfo is None


class DueAtField(AwareDateTimeField):
    """A due time: also no later than the horizon allows (contract.due_at_pattern)."""

    def to_internal_value(self, value: Any) -> datetime:
        parsed = super().to_internal_value(value)
        latest = contract.latest_due_date(timezone.now().astimezone(UTC).date())
        if value[:10] > latest.isoformat():
            raise serializers.ValidationError(
                f"due_at is more than {conf.max_horizon().days} days ahead (written dates "
                f"up to {latest.isoformat()} are accepted today).",
                code="invalid_due_at",
            )
        return parsed


class CallbackUrlField(StrictCharField):
    """An http(s) URL the SSRF rules accept, of the shape the schema states."""

    def to_internal_value(self, data: Any) -> str:
        url = super().to_internal_value(data)
        try:
            netguard.check_url(url, conf.callback_allowlist())
        except netguard.BlockedTarget as error:
            raise serializers.ValidationError(
                f"callback_url is not allowed: {error}.", code="invalid_target"
            ) from error
        if not re.match(contract.callback_url_pattern(allowlist_hosts()), url):
            raise serializers.ValidationError(
                "callback_url must be http(s)://<host name>[:port][/path][?query] "
                "(IP addresses only when on SENDLATER_CALLBACK_ALLOWLIST).",
                code="invalid_target",
            )
        return url


def allowlist_hosts() -> tuple[str, ...]:
    """Entries of SENDLATER_CALLBACK_ALLOWLIST for contract.callback_url_pattern: names
    and single addresses as they appear in a URL, networks as CIDR (``127.0.0.0/8``)."""
    allow = conf.callback_allowlist()
    hosts = sorted(allow.names)
    for net in allow.networks:
        if net.num_addresses > 1:
            hosts.append(str(net))
        elif net.version == 6:
            hosts.append(f"[{net.network_address}]")
        else:
            hosts.append(str(net.network_address))
    return tuple(hosts)
