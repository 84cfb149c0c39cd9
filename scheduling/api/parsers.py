"""A JSON parser that bounds the body and refuses what the database cannot store."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser
from rest_framework.utils import json


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "request_too_large"


def _unstorable(data: Any) -> str | None:
    """Say why ``data`` cannot be stored as-is, or None.

    PostgreSQL refuses NUL characters in text and jsonb, lone surrogates cannot be
    encoded as UTF-8, and a number like 1e400 parses to infinity, which JSON has
    no spelling for. Iterative, so deep nesting cannot exhaust the stack.
    """
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "strings must not contain NUL characters"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "strings must be valid Unicode (no lone surrogates)"
        elif isinstance(item, float) and not math.isfinite(item):
            return "numbers must be finite"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


class BoundedJSONParser(JSONParser):
    """JSON bodies up to SENDLATER_MAX_REQUEST_BYTES (413 beyond), checked for storability."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = settings.SENDLATER_MAX_REQUEST_BYTES
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise RequestTooLarge(
                f"Request body exceeds {limit} bytes (SENDLATER_MAX_REQUEST_BYTES)."
            )
        return json_loads(raw)


def json_loads(raw: bytes) -> Any:
    """``raw`` (UTF-8 JSON) parsed as the API parses bodies; ParseError if it is not JSON
    or holds a value the database cannot store."""
    overflow = []

    def parse_float(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            overflow.append(text)
        return value

    try:
        text = raw.decode("utf-8")
        data = json.loads(text, parse_float=parse_float)
    except (ValueError, RecursionError) as error:
        # UnicodeDecodeError and JSONDecodeError are both ValueErrors.
        raise exceptions.ParseError(f"JSON parse error: {error}") from error
    # A NUL or a lone surrogate can only come from a \u escape (the decoder
    # refuses encoded surrogates, the JSON parser raw control characters), and
    # a non-finite number from a float literal: without either, the walk over
    # every value (~5 ms for 1,000 jobs) has nothing to find.
    if overflow or "\\u" in text:
        reason = _unstorable(data)
        if reason:
            raise exceptions.ParseError(f"Unsupported JSON value: {reason}.")
    return data
