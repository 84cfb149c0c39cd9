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
    flow_control_key: str | None = None

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
            flow_control_key=data.get("flow_control_key"),
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


@dataclass(frozen=True)
class FlowControl:
    """A flow-control key's limits and live state."""

    key: str
    rate: int | None
    period_seconds: int
    parallelism: int | None
    paused: bool
    waiting: int = 0  # due jobs held back by the key
    in_flight: int = 0
    delivered_in_period: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FlowControl:
        return cls(
            key=data["key"],
            rate=data.get("rate"),
            period_seconds=data.get("period_seconds", 1),
            parallelism=data.get("parallelism"),
            paused=bool(data.get("paused")),
            waiting=data.get("waiting", 0),
            in_flight=data.get("in_flight", 0),
            delivered_in_period=data.get("delivered_in_period", 0),
            created_at=parse_dt(data.get("created_at")),
            updated_at=parse_dt(data.get("updated_at")),
        )
