"""API test helpers: authenticated clients and request bodies."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from rest_framework.test import APIClient

from scheduling.models import Team
from scheduling.sharding.clock import db_now
from scheduling.teams import api_key_create


def client_for(team: Team) -> APIClient:
    _api_key, key = api_key_create(team=team, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    client.api_key = key
    return client


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def job_body(*, in_seconds: float = 300, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "due_at": iso(db_now() + timedelta(seconds=in_seconds)),
        "handler": "noop",
        "payload": {"n": 1},
    }
    body.update(extra)
    return body


def error_of(response: Any) -> dict[str, Any]:
    """The ``error`` object of a 4xx, checking the one shape every error has."""
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    assert set(error) <= {"code", "message", "fields"}
    return error


_VARYING = re.compile(
    rb'("id": ?"|/api/v1/jobs/)[0-9a-f-]{36}|("shard": ?)[0-9]+'
    rb'|("(?:created|updated)_at": ?")[^"]+'
)


def mask_varying(raw: bytes) -> bytes:
    """``raw`` with what differs between two creates of the same body masked: the new
    job's id (also in its URL), its shard and the clock's times."""
    return _VARYING.sub(lambda match: (match[1] or match[2] or match[3]) + b"*", raw)
