"""Keyset cursors over ``(due_at, id)``: stable under inserts, cheap at any depth.

A cursor is the last row's position, base64url-encoded and opaque to clients.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from datetime import UTC, datetime

from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.utils.urls import replace_query_param

DEFAULT_LIMIT = 100


class InvalidCursor(exceptions.ValidationError):
    def __init__(self) -> None:
        super().__init__({"cursor": ["Invalid cursor."]})


def cursor_encode(due_at: datetime, job_id: uuid.UUID) -> str:
    raw = f"{due_at.astimezone(UTC).isoformat()}|{job_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_decode(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, _, job_id = raw.partition("|")
        due_at = datetime.fromisoformat(stamp)
        if due_at.tzinfo is None:
            raise ValueError("naive")
        return due_at, uuid.UUID(job_id)
    except (binascii.Error, UnicodeDecodeError, ValueError) as error:
        raise InvalidCursor from error


def next_url(request: Request, cursor: str | None) -> str | None:
    if cursor is None:
        return None
    return replace_query_param(request.build_absolute_uri(), "cursor", cursor)
