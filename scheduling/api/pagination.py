"""Keyset cursors over ``(due_at, id)``: stable under inserts, cheap at any depth.

A cursor is the last row's position, ``<microseconds since the epoch>.<id in hex>``:
opaque to clients, and every string of that shape (the schema's pattern) decodes.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

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
