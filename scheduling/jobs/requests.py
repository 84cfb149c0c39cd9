"""What a job sends and how it retries: the delivery contract beside its target.

``DeliveryRequest`` is what a client asks for besides the target and payload: the
HTTP method, headers, body format, timeout, retry policy, outcome callbacks and
whether to keep the response. ``RequestChecker.check`` raises a SchedulingError
naming the field (``headers.Host``, ``retry.max_attempts``); ``request_stored`` is
the stored form, the job's one nullable ``request`` column: None for the default
request (most jobs, which the pollers read and send exactly as before). Header
values are sealed there (``scheduling.sealing``) and never come back out through
``request_public``: names with masked values.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import orjson
from django.conf import settings

from scheduling import conf, netguard, sealing
from scheduling.errors import InvalidTarget, SchedulingError

# The API's names of a DeliveryRequest's fields (on jobs, bulk items and schedules).
CONTRACT_FIELDS = (
    "method",
    "headers",
    "format",
    "content_type",
    "timeout_seconds",
    "retry",
    "on_success_url",
    "on_failure_url",
    "capture_response",
)
METHODS = ("POST", "PUT", "PATCH", "DELETE", "GET")
BODYLESS_METHODS = frozenset({"GET", "DELETE"})
FORMATS = ("envelope", "payload")
MAX_HEADERS = 20
MAX_HEADER_BYTES = 8 * 1024  # names and values together, as sent ("name: value\r\n")
MAX_HEADER_NAME_CHARS = 100
MAX_HEADER_VALUE_CHARS = 4096
MAX_CONTENT_TYPE_CHARS = 200
TIMEOUT_MIN_SECONDS = 1
TIMEOUT_MAX_SECONDS = 120
MAX_ATTEMPTS_LIMIT = 50
MAX_BACKOFF_LIMIT_SECONDS = 86_400  # a day
MASK = "********"
# RFC 9110 token characters (a header name, a media type's type and subtype).
TOKEN_CHARS = r"!#$%&'*+.^_`|~0-9A-Za-z-"  # noqa: S105 (a character class, not a secret)
HEADER_NAME = re.compile(rf"[{TOKEN_CHARS}]+")  # fullmatch: no "$" before a final newline
# A header value: visible ASCII, spaces and tabs (no CR, LF or other controls).
HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")
CONTENT_TYPE = re.compile(rf"[{TOKEN_CHARS}]+/[{TOKEN_CHARS}]+(?:[ \t]*;[\t\x20-\x7e]*)?")
# Hop-by-hop headers (RFC 9110 7.6.1), what the transport sets itself, and the
# signature's: a job may not send them. Content-Type comes from ``content_type``.
REFUSED_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-type",
        "expect",
    }
)
REFUSED_HEADER_PREFIX = "webhook-"
PAYLOAD_JSON_CONTENT_TYPE = "application/json"
PAYLOAD_TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class RetryPolicy:
    """A retry policy; a missing value falls to the team's default, then the service's."""

    max_attempts: int | None = None
    min_backoff_seconds: int | None = None
    max_backoff_seconds: int | None = None

    def stored(self) -> dict[str, int]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class DeliveryRequest:
    """What a job sends and what is heard after; every default is today's webhook."""

    method: str = "POST"
    headers: Mapping[str, str] = field(default_factory=dict)  # plain text: in memory only
    format: str = "envelope"
    content_type: str | None = None  # format "payload" only
    timeout_seconds: int | None = None
    retry: RetryPolicy | None = None
    on_success_url: str | None = None
    on_failure_url: str | None = None
    capture_response: bool = False

    def is_default(self) -> bool:
        return self == _DEFAULT

    def fingerprint_part(self) -> dict[str, Any]:
        """The request's part of an idempotency fingerprint; header values keyed by
        SECRET_KEY (an HMAC), so the fingerprint column holds no readable digest of them."""
        part = _stored_plain(self)
        if self.headers:
            text = orjson.dumps(dict(self.headers), option=orjson.OPT_SORT_KEYS)
            key = settings.SECRET_KEY.encode()
            part["headers"] = hmac.new(key, text, hashlib.sha256).hexdigest()
        return part


_DEFAULT = DeliveryRequest()


def webhook_url_check(url: Any, *, field: str, name: str = "callback_url") -> None:
    """An absolute http(s) URL the SSRF rules accept, or InvalidTarget naming ``field``."""
    if not isinstance(url, str) or not url:
        raise InvalidTarget(f"{name} must be a URL.", field=field)
    if len(url) > 2048:
        raise InvalidTarget(f"{name} is longer than 2048 characters.", field=field)
    try:
        parts = urlsplit(url)
    except ValueError as error:  # a bracketed host that is no IPv6 address
        raise InvalidTarget(f"{name} is not a valid URL: {error}.", field=field) from error
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidTarget(f"{name} must be an absolute http(s) URL.", field=field)
    try:
        netguard.check_url(url, conf.callback_allowlist())
    except netguard.BlockedTarget as error:
        raise InvalidTarget(
            f"{name} is not allowed: {error} (SENDLATER_CALLBACK_ALLOWLIST).", field=field
        ) from error


def header_refusal(name: str) -> str | None:
    """Why a job may not send header ``name``, or None if it may."""
    lower = name.lower()
    if lower.startswith(REFUSED_HEADER_PREFIX):
        return f"{name} is the signature's (Standard Webhooks): sendlater sets it."
    if lower == "content-type":
        return "Content-Type is set by content_type (with format 'payload')."
    if lower in REFUSED_HEADERS:
        return f"{name} is set by the transport (a hop-by-hop or framing header)."
    return None


def _int_in(value: Any, low: int, high: int, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SchedulingError(f"{field} must be an integer from {low} to {high}.", field=field)
    return value


class RequestChecker:
    """Checks requests of one batch; each distinct callback URL is checked once."""

    def __init__(self) -> None:
        self.urls_ok: set[str] = set()

    def check(self, request: DeliveryRequest, *, target_kind: str, payload: Any) -> None:
        """Raise a SchedulingError naming the field if ``request`` cannot be sent."""
        del target_kind  # a handler job ignores what shapes a webhook; its checks hold all the same
        if request.method not in METHODS:
            raise SchedulingError(f"method must be one of {', '.join(METHODS)}.", field="method")
        self._check_headers(request.headers)
        self._check_body(request, payload)
        if request.timeout_seconds is not None:
            _int_in(
                request.timeout_seconds,
                TIMEOUT_MIN_SECONDS,
                TIMEOUT_MAX_SECONDS,
                "timeout_seconds",
            )
        if request.retry is not None:
            retry_policy_check(request.retry, field="retry")
        for name in ("on_success_url", "on_failure_url"):
            url = getattr(request, name)
            if url is not None and url not in self.urls_ok:
                webhook_url_check(url, field=name, name=name)
                self.urls_ok.add(url)
        if not isinstance(request.capture_response, bool):
            raise SchedulingError(
                "capture_response must be true or false.", field="capture_response"
            )

    def _check_headers(self, headers: Any) -> None:
        if not isinstance(headers, Mapping):
            raise SchedulingError("headers must map names to values.", field="headers")
        if len(headers) > MAX_HEADERS:
            raise SchedulingError(f"At most {MAX_HEADERS} headers.", field="headers")
        total = 0
        seen: set[str] = set()
        for name, value in headers.items():
            where = f"headers.{name}"
            if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
                raise SchedulingError(
                    "A header name must be an HTTP token (letters, digits, !#$%&'*+.^_`|~-).",
                    field=where,
                )
            if len(name) > MAX_HEADER_NAME_CHARS:
                raise SchedulingError(
                    f"A header name has at most {MAX_HEADER_NAME_CHARS} characters.", field=where
                )
            refusal = header_refusal(name)
            if refusal:
                raise SchedulingError(refusal, field=where)
            if name.lower() in seen:
                raise SchedulingError(f"{name} is given twice.", field=where)
            seen.add(name.lower())
            if not isinstance(value, str) or not HEADER_VALUE.fullmatch(value):
                raise SchedulingError(
                    "A header value must be a string of printable ASCII (no CR or LF).",
                    field=where,
                )
            if len(value) > MAX_HEADER_VALUE_CHARS:
                raise SchedulingError(
                    f"A header value has at most {MAX_HEADER_VALUE_CHARS} characters.",
                    field=where,
                )
            total += len(name) + len(value) + 4
        if total > MAX_HEADER_BYTES:
            raise SchedulingError(
                f"headers take {total} bytes as sent; the limit is {MAX_HEADER_BYTES}.",
                field="headers",
            )

    def _check_body(self, request: DeliveryRequest, payload: Any) -> None:
        if request.format not in FORMATS:
            raise SchedulingError("format must be 'envelope' or 'payload'.", field="format")
        content_type = request.content_type
        if content_type is None:
            return
        if request.format != "payload":
            raise SchedulingError(
                "content_type applies to format 'payload' only (the envelope is JSON).",
                field="content_type",
            )
        if (
            not isinstance(content_type, str)
            or len(content_type) > MAX_CONTENT_TYPE_CHARS
            or not CONTENT_TYPE.fullmatch(content_type)
        ):
            raise SchedulingError(
                "content_type must be a media type such as text/csv or "
                "application/x-www-form-urlencoded; charset=utf-8.",
                field="content_type",
            )
        del payload


def retry_policy_check(policy: RetryPolicy, *, field: str) -> None:
    """Raise a SchedulingError naming ``field.<value>`` if ``policy`` is out of bounds."""
    if policy.max_attempts is not None:
        _int_in(policy.max_attempts, 1, MAX_ATTEMPTS_LIMIT, f"{field}.max_attempts")
    for name in ("min_backoff_seconds", "max_backoff_seconds"):
        value = getattr(policy, name)
        if value is not None:
            _int_in(value, 1, MAX_BACKOFF_LIMIT_SECONDS, f"{field}.{name}")
    low, high = policy.min_backoff_seconds, policy.max_backoff_seconds
    if low is not None and high is not None and low > high:
        raise SchedulingError(
            "max_backoff_seconds must be at least min_backoff_seconds.",
            field=f"{field}.max_backoff_seconds",
        )


def _stored_plain(request: DeliveryRequest) -> dict[str, Any]:
    """The stored form's keys that differ from the default, headers left out."""
    out: dict[str, Any] = {}
    if request.method != "POST":
        out["method"] = request.method
    if request.format != "envelope":
        out["format"] = request.format
    if request.content_type is not None:
        out["content_type"] = request.content_type
    if request.timeout_seconds is not None:
        out["timeout_seconds"] = request.timeout_seconds
    if request.retry is not None and request.retry.stored():
        out["retry"] = request.retry.stored()
    if request.on_success_url is not None:
        out["on_success_url"] = request.on_success_url
    if request.on_failure_url is not None:
        out["on_failure_url"] = request.on_failure_url
    if request.capture_response:
        out["capture_response"] = True
    return out


class RequestSealer:
    """Stored forms of one batch: each distinct header set is sealed once (a bulk call
    repeats one Authorization header a thousand times; one Fernet token serves all)."""

    def __init__(self) -> None:
        self._sealed: dict[tuple[tuple[str, str], ...], str] = {}

    def stored(self, request: DeliveryRequest | None) -> dict[str, Any] | None:
        """The ``request`` column's value: None for the default request."""
        if request is None or request.is_default():
            return None
        out = _stored_plain(request)
        if request.headers:
            key = tuple(request.headers.items())
            token = self._sealed.get(key)
            if token is None:
                token = self._sealed[key] = sealing.seal(orjson.dumps(dict(key)).decode())
            out["header_names"] = list(request.headers)
            out["headers_sealed"] = token
        return out or None


def request_stored(request: DeliveryRequest | None) -> dict[str, Any] | None:
    """The ``request`` column's value for one request (``RequestSealer`` for a batch)."""
    return RequestSealer().stored(request)


def headers_unsealed(stored: Mapping[str, Any]) -> dict[str, str]:
    """The header values of a stored request, in plain text: for the sender only.

    A bulk call's jobs and a schedule's occurrences share one token (``RequestSealer``),
    so the sender opens each token once and keeps the last ``UNSEALED_CACHE`` opened,
    in its own memory only (keyed by the keys too: a key dropped opens nothing more).
    """
    token = stored.get("headers_sealed")
    if not token:
        return {}
    return dict(_unsealed(token, tuple(settings.SENDLATER_ENCRYPTION_KEYS)))


UNSEALED_CACHE = 1024


@lru_cache(maxsize=UNSEALED_CACHE)
def _unsealed(token: str, keys: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    del keys  # part of the cache key only: sealing reads the same setting
    return tuple(orjson.loads(sealing.unseal(token)).items())


def stored_resealed(stored: Mapping[str, Any]) -> dict[str, Any] | None:
    """``stored`` with its headers sealed again under the first key, or None when it
    holds none (``manage.py reencrypt_headers``)."""
    token = stored.get("headers_sealed")
    if not token:
        return None
    return {**stored, "headers_sealed": sealing.reseal(token)}


def request_public(stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """The request as the API and console show it: every field, header values masked."""
    if not stored:
        return {**_PUBLIC_DEFAULT, "headers": {}, "callbacks": {}}
    retry = stored.get("retry")
    return {
        "method": stored.get("method", "POST"),
        "headers": {name: MASK for name in stored.get("header_names", ())},
        "format": stored.get("format", "envelope"),
        "content_type": stored.get("content_type"),
        "timeout_seconds": stored.get("timeout_seconds"),
        "retry": dict(retry) if retry else None,
        "on_success_url": stored.get("on_success_url"),
        "on_failure_url": stored.get("on_failure_url"),
        "capture_response": bool(stored.get("capture_response", False)),
        "callbacks": dict(stored.get("callbacks", {})),
    }


def request_from_stored(
    stored: Mapping[str, Any] | None, headers: Mapping[str, str] | None = None
) -> DeliveryRequest | None:
    """A DeliveryRequest of a stored form (``headers``: the plain values, when known)."""
    if not stored:
        return None
    retry = stored.get("retry")
    return DeliveryRequest(
        method=stored.get("method", "POST"),
        headers=dict(headers) if headers is not None else headers_unsealed(stored),
        format=stored.get("format", "envelope"),
        content_type=stored.get("content_type"),
        timeout_seconds=stored.get("timeout_seconds"),
        retry=RetryPolicy(**retry) if retry else None,
        on_success_url=stored.get("on_success_url"),
        on_failure_url=stored.get("on_failure_url"),
        capture_response=bool(stored.get("capture_response", False)),
    )


def request_merged(stored: Mapping[str, Any] | None, changes: Mapping[str, Any]) -> DeliveryRequest:
    """Changed fields (API names, ``retry`` a mapping) over a stored request (a PATCH)."""
    current = request_from_stored(stored) or DeliveryRequest()
    values: dict[str, Any] = {name: getattr(current, name) for name in CONTRACT_FIELDS}
    values.update((name, changes[name]) for name in CONTRACT_FIELDS if name in changes)
    values["headers"] = dict(values["headers"] or {})
    if values["format"] != "payload":
        values["content_type"] = None  # the envelope is JSON: a change back drops it
    retry = values["retry"]
    if isinstance(retry, Mapping):
        values["retry"] = RetryPolicy(**retry) if retry else None
    values["capture_response"] = bool(values["capture_response"])
    return DeliveryRequest(**values)


_PUBLIC_DEFAULT = request_public({"method": "POST"})  # most jobs' (read before each use)
