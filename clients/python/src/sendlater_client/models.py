"""Typed results, built from the API's JSON (datetimes are aware, UTC)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


def parse_dt(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def format_dt(value: datetime | str) -> str:
    if isinstance(value, str):
        return value
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("due_at must be timezone-aware (naive datetimes are refused)")
    return value.isoformat()


@dataclass(frozen=True)
class Job:
    id: str
    status: str
    due_at: datetime
    bucket: datetime | None = None
    shard: int | None = None
    attempts: int = 0
    callback_url: str | None = None
    handler: str | None = None
    payload: Any = None
    metadata: dict[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None
    window_seconds: int = 0
    expires_at: datetime | None = None
    delivered_at: datetime | None = None
    last_error: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    created: bool | None = None  # bulk answers only: False for an idempotent replay

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        return cls(
            id=data["id"],
            status=data["status"],
            due_at=parse_dt(data["due_at"]),  # type: ignore[arg-type]
            bucket=parse_dt(data.get("bucket")),
            shard=data.get("shard"),
            attempts=data.get("attempts", 0),
            callback_url=data.get("callback_url"),
            handler=data.get("handler"),
            payload=data.get("payload"),
            metadata=data.get("metadata") or {},
            idempotency_key=data.get("idempotency_key"),
            window_seconds=data.get("window_seconds", 0),
            expires_at=parse_dt(data.get("expires_at")),
            delivered_at=parse_dt(data.get("delivered_at")),
            last_error=data.get("last_error", ""),
            created_at=parse_dt(data.get("created_at")),
            updated_at=parse_dt(data.get("updated_at")),
            created=data.get("created"),
        )


@dataclass(frozen=True)
class Attempt:
    attempt: int
    started_at: datetime
    duration_ms: int | None
    result: str
    status_code: int | None
    error: str

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attempt:
        return cls(
            attempt=data["attempt"],
            started_at=parse_dt(data["started_at"]),  # type: ignore[arg-type]
            duration_ms=data.get("duration_ms"),
            result=data.get("result", ""),
            status_code=data.get("status_code"),
            error=data.get("error") or "",
        )
