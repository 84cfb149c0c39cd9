"""The one place where errors become HTTP responses, all in one JSON shape.

    {"error": {"code": "invalid", "message": "...", "fields": {"jobs[17].due_at": ["..."]}}}

``fields`` is present when the error names inputs. Domain errors from the services
carry their own code and status; DRF's (validation, auth, throttling, parsing) are
reshaped here so that every 4xx reads the same.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from scheduling.errors import SchedulingError
from scheduling.storage.failover import connection_discard, is_failover_error

# A service names the n-th spec of a bulk call "[n].field".
_BULK_FIELD = re.compile(r"^\[(\d+)\]\.(.+)$")

_DRF_CODES = {
    exceptions.ValidationError: "invalid",
    exceptions.ParseError: "parse_error",
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
}


def error_body(code: str, message: str, fields: dict[str, list[str]] | None = None) -> dict:
    error: dict[str, Any] = {"code": code, "message": message}
    if fields:
        error["fields"] = fields
    return {"error": error}


# DRF's stock messages, in the API's own words. Generic tools recognise DRF's wording
# and then read the body as DRF's bare {field: [...]} envelope, misplacing our fields
# (schemathesis took error.fields.due_at for a request property named "error").
_STOCK_MESSAGES = {
    "This field is required.": "Required.",
    "This field may not be blank.": "Must not be empty.",
    "This field may not be null.": "Must not be null.",
    "Must be a valid UUID.": "Must be a UUID.",
    "A valid integer is required.": "Must be an integer.",
    "A valid number is required.": "Must be a number.",
    "Must be a valid boolean.": "Must be true or false.",
}
_STOCK_PATTERNS = (
    (
        re.compile(r"^Ensure this (?:field|value) has (?:no more than|at most) (\d+) characters?"),
        "At most {} characters.",
    ),
    (
        re.compile(r"^Ensure this (?:field|value) has at least (\d+) characters?"),
        "At least {} characters.",
    ),
    (re.compile(r"^Ensure this field has no more than (\d+) elements?"), "At most {} items."),
    (re.compile(r"^Ensure this field has at least (\d+) elements?"), "At least {} items."),
    (re.compile(r"^Ensure this value is greater than or equal to (\S+)\.$"), "At least {}."),
    (re.compile(r"^Ensure this value is less than or equal to (\S+)\.$"), "At most {}."),
    (re.compile(r"^Expected a list of items but got type"), "Must be a list."),
    (re.compile(r"^Expected a dictionary of items but got type"), "Must be an object."),
)


def _own_words(message: str) -> str:
    if message in _STOCK_MESSAGES:
        return _STOCK_MESSAGES[message]
    for pattern, wording in _STOCK_PATTERNS:
        match = pattern.match(message)
        if match:
            return wording.format(*match.groups())
    return message


def flatten_fields(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """``{"jobs": [{}, {"due_at": ["x"]}]}`` -> ``{"jobs[1].due_at": ["x"]}``."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            if isinstance(key, int):
                name = f"{prefix}[{key}]"
            elif key == "non_field_errors":
                name = prefix or "non_field_errors"
            else:
                name = f"{prefix}.{key}" if prefix else str(key)
            for field, messages in flatten_fields(value, name).items():
                out.setdefault(field, []).extend(messages)
    elif isinstance(detail, list) and any(isinstance(item, dict | list) for item in detail):
        for index, value in enumerate(detail):
            out.update(flatten_fields(value, f"{prefix}[{index}]"))
    elif isinstance(detail, list):
        out[prefix or "non_field_errors"] = [_own_words(str(item)) for item in detail]
    else:
        out[prefix or "non_field_errors"] = [_own_words(str(detail))]
    return out


def api_field_name(field: str | None, context: dict[str, Any]) -> str | None:
    """Name a service's field as the request did: ``[17].target`` -> ``jobs[17].handler``."""
    if field is None:
        return None
    match = _BULK_FIELD.match(field)
    index, name = (int(match[1]), match[2]) if match else (None, field)
    if name == "target":
        kinds = context.get("target_fields") or {}
        name = kinds.get(index if index is not None else 0, "callback_url")
    return f"jobs[{index}].{name}" if index is not None else name


def _domain_response(exc: SchedulingError, context: dict[str, Any]) -> Response:
    request = context.get("request")
    field = api_field_name(exc.field, getattr(request, "sendlater_context", {}))
    fields = {field: [exc.message]} if field else None
    return Response(error_body(exc.code, exc.message, fields), status=exc.status)


# How long a client should wait before retrying a request that met a failover:
# about the time pg_auto_failover takes to promote the secondary (docs/ha.md).
UNAVAILABLE_RETRY_AFTER_SECONDS = 2


def _unavailable_response() -> Response:
    """The primary vanished or was demoted mid-request (docs/ha.md).

    The request is not retried here: a create whose commit was lost in flight
    cannot be told from one that never ran, so the client decides (with an
    Idempotency-Key a retried create is safe). The connection is discarded so the
    next request connects to the new primary.
    """
    connection_discard()
    response = Response(
        error_body(
            "unavailable",
            "The database is unavailable (failing over or restarting); retry after a "
            "moment (creates with an Idempotency-Key are safe to retry).",
        ),
        status=status.HTTP_503_SERVICE_UNAVAILABLE,
    )
    response["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER_SECONDS)
    return response


# Field errors that are the domain's (a field can say so earlier than the service).
_FIELD_DOMAIN_CODES = frozenset({"invalid_due_at", "invalid_target"})


def _domain_code(exc: exceptions.ValidationError) -> str | None:
    """The domain code when every field error of ``exc`` carries that one code."""
    codes: set[str] = set()
    stack = [exc.get_codes()]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            codes.add(str(item))
    return codes.pop() if len(codes) == 1 and codes <= _FIELD_DOMAIN_CODES else None


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, SchedulingError):
        return _domain_response(exc, context)
    if is_failover_error(exc):
        return _unavailable_response()
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response  # not ours to shape: a real bug, a 500 with a traceback in the log
    code = next(
        (c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)),
        exc.default_code if isinstance(exc.default_code, str) else "error",
    )
    if isinstance(exc, exceptions.ValidationError):
        code = _domain_code(exc) or code
        fields = flatten_fields(exc.detail)
        message = "The request is not valid; see fields."
        if list(fields) == ["non_field_errors"]:
            message = fields.pop("non_field_errors")[0]
        response.data = error_body(code, message, fields or None)
    else:
        detail = exc.detail
        message = str(detail) if not isinstance(detail, list | dict) else str(exc.default_detail)
        response.data = error_body(code, message)
    # DRF sets Retry-After from exc.wait; make sure a client always gets one.
    if response.status_code == status.HTTP_429_TOO_MANY_REQUESTS and not response.has_header(
        "Retry-After"
    ):
        response["Retry-After"] = "1"
    return response


# The error body every 4xx/5xx answer has (the OpenAPI schema's ``Error``).
class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), required=False
    )


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()
