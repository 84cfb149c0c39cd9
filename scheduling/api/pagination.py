"""Keyset cursors over ``(due_at, id)``: stable under inserts, cheap at any depth.

A cursor is the last row's position, ``<microseconds since the epoch>.<id in hex>``:
opaque to clients, and every string of that shape (the schema's pattern) decodes.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.utils.urls import replace_query_param

from scheduling.api import contract

DEFAULT_LIMIT = 100
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class InvalidCursor(exceptions.ValidationError):
    def __init__(self) -> None:
        super().__init__({"cursor": ["Invalid cursor."]})


def cursor_encode(due_at: datetime, job_id: uuid.UUID) -> str:
    micros = (due_at - _EPOCH) // timedelta(microseconds=1)
    return f"{micros}.{job_id.hex}"


def cursor_decode(cursor: str) -> tuple[datetime, uuid.UUID]:
    if not re.match(contract.CURSOR, cursor):
        raise InvalidCursor
    micros, _, hex_id = cursor.partition(".")
    try:
        return _EPOCH + timedelta(microseconds=int(micros)), uuid.UUID(hex=hex_id)
    except (OverflowError, ValueError) as error:
        raise InvalidCursor from error


def next_url(request: Request, cursor: str | None) -> str | None:
    if cursor is None:
        return None
    return replace_query_param(request.build_absolute_uri(), "cursor", cursor)


def key_cursor_encode(key: str) -> str:
    """A cursor after ``key`` in a list ordered by key: its UTF-8 bytes in hex."""
    return key.encode().hex()


def key_cursor_decode(cursor: str) -> str:
    """The key a ``key_cursor_encode`` cursor stands after. Any string of the schema's
    shape (``contract.FLOW_CONTROL_CURSOR``) is a position: bytes that are no UTF-8
    decode with replacement characters, still a bound to compare keys with."""
    if not re.match(contract.FLOW_CONTROL_CURSOR, cursor):
        raise InvalidCursor
    key = bytes.fromhex(cursor).decode("utf-8", errors="replace")
    # No key holds NUL (PostgreSQL text cannot): the part before one is the bound.
    return key.split("\x00", 1)[0]


def page_params(validated: Mapping[str, Any]) -> tuple[str | None, int]:
    """A list query's ``cursor`` (None: the first page) and ``limit``."""
    return validated.get("cursor"), validated.get("limit", DEFAULT_LIMIT)


def page_cut[T](
    rows: Sequence[T], limit: int, position: Callable[[T], str]
) -> tuple[list[T], str | None]:
    """The page in ``rows`` (a list or a queryset, read ``limit + 1`` deep: a row past
    the page says one more follows) and the cursor after its last row, ``position`` of
    it; None: the last page."""
    page = list(rows[: limit + 1])
    if len(page) <= limit:
        return page, None
    del page[limit:]
    return page, position(page[-1])


def page_body(request: Request, results: list[Any], next_cursor: str | None) -> dict[str, Any]:
    """A list response: the page's ``results``, ``next_cursor`` and the ``next`` URL."""
    return {
        "results": results,
        "next_cursor": next_cursor,
        "next": next_url(request, next_cursor),
    }
