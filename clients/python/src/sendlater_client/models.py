"""Typed results, built from the API's JSON (datetimes are aware, UTC)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict


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
class JobRetry:
    """A job's (or schedule's, or team's) retry policy; None falls to the next level
    (job, then team, then the service)."""

    max_attempts: int | None = None
    min_backoff_seconds: int | None = None
    max_backoff_seconds: int | None = None

    def to_json(self) -> dict[str, int]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> JobRetry | None:
        if not data:
            return None
        return cls(
            max_attempts=data.get("max_attempts"),
            min_backoff_seconds=data.get("min_backoff_seconds"),
            max_backoff_seconds=data.get("max_backoff_seconds"),
        )


@dataclass(frozen=True)
class KeptResponse:
    """A successful response kept where the job asked (``capture_response``)."""

    status_code: int
    content_type: str | None
    body_excerpt: str
    duration_ms: int | None

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> KeptResponse | None:
        if not data:
            return None
        return cls(
            status_code=data["status_code"],
            content_type=data.get("content_type"),
            body_excerpt=data.get("body_excerpt", ""),
            duration_ms=data.get("duration_ms"),
        )


class DeliveryFields(TypedDict, total=False):
    """The delivery contract's fields of a job or schedule (keyword arguments)."""

    method: str  # POST (default), PUT, PATCH, DELETE, GET
    headers: dict[str, str]  # kept encrypted, read back masked
    format: str  # "envelope" (default) or "payload"
    content_type: str  # with format "payload"
    timeout_seconds: int
    retry: JobRetry | dict[str, int]
    on_success_url: str
    on_failure_url: str
    capture_response: bool


class JobFields(DeliveryFields, total=False):
    """What ``Client.schedule`` takes besides ``due_at``."""

    callback_url: str
    handler: str
    topic: str  # one delivery per endpoint of the topic, at the due time
    payload: Any
    metadata: dict[str, str]
    idempotency_key: str
    window_seconds: int
    expires_after_seconds: int
    flow_control_key: str


@dataclass(frozen=True)
class Delivery:
    """What a job (or every occurrence of a schedule) sends; header values read masked."""

    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    format: str = "envelope"
    content_type: str | None = None
    timeout_seconds: int | None = None
    retry: JobRetry | None = None
    on_success_url: str | None = None
    on_failure_url: str | None = None
    capture_response: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Delivery:
        return cls(
            method=data.get("method") or "POST",
            headers=data.get("headers") or {},
            format=data.get("format") or "envelope",
            content_type=data.get("content_type"),
            timeout_seconds=data.get("timeout_seconds"),
            retry=JobRetry.from_json(data.get("retry")),
            on_success_url=data.get("on_success_url"),
            on_failure_url=data.get("on_failure_url"),
            capture_response=bool(data.get("capture_response")),
        )


@dataclass(frozen=True)
class TopicDelivery:
    """A fanned-out topic job's delivery to one endpoint: a job of its own."""

    endpoint: str
    job_id: str
    status: str | None  # None: pruned by retention
    attempts: int = 0
    last_error: str = ""
    delivered_at: datetime | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicDelivery:
        return cls(
            endpoint=data["endpoint"],
            job_id=data["job_id"],
            status=data.get("status"),
            attempts=data.get("attempts", 0),
            last_error=data.get("last_error") or "",
            delivered_at=parse_dt(data.get("delivered_at")),
        )


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
    topic: str | None = None
    # A fanned-out topic job's delivery to each endpoint (None: not fanned out).
    deliveries: list[TopicDelivery] | None = None
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
    schedule_id: str | None = None
    scheduled_for: datetime | None = None
    delivery: Delivery = field(default_factory=Delivery)
    # The callback jobs its outcome made: event (job.delivered, ...) -> job id.
    callbacks: dict[str, str] = field(default_factory=dict)
    response: KeptResponse | None = None

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
            topic=data.get("topic"),
            deliveries=None
            if data.get("deliveries") is None
            else [TopicDelivery.from_json(d) for d in data["deliveries"]],
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
            schedule_id=data.get("schedule_id"),
            scheduled_for=parse_dt(data.get("scheduled_for")),
            delivery=Delivery.from_json(data),
            callbacks=data.get("callbacks") or {},
            response=KeptResponse.from_json(data.get("response")),
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


@dataclass(frozen=True)
class Schedule:
    """A recurring schedule: each occurrence becomes a job."""

    id: str
    cron: str | None
    every_seconds: int | None
    timezone: str
    callback_url: str | None
    handler: str | None
    payload: Any
    metadata: dict[str, str]
    window_seconds: int
    expires_after_seconds: int | None
    start_at: datetime | None
    end_at: datetime | None
    missed: str
    flow_control_key: str | None
    paused: bool
    next_occurrences: list[datetime]
    delivery: Delivery
    created_at: datetime | None = None
    updated_at: datetime | None = None
    topic: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Schedule:
        return cls(
            id=data["id"],
            cron=data.get("cron"),
            every_seconds=data.get("every_seconds"),
            timezone=data.get("timezone", "UTC"),
            callback_url=data.get("callback_url"),
            handler=data.get("handler"),
            topic=data.get("topic"),
            payload=data.get("payload"),
            metadata=data.get("metadata") or {},
            window_seconds=data.get("window_seconds", 0),
            expires_after_seconds=data.get("expires_after_seconds"),
            start_at=parse_dt(data.get("start_at")),
            end_at=parse_dt(data.get("end_at")),
            missed=data.get("missed", "skip"),
            flow_control_key=data.get("flow_control_key"),
            paused=bool(data.get("paused")),
            next_occurrences=[parse_dt(v) for v in data.get("next_occurrences") or []],  # type: ignore[misc]
            delivery=Delivery.from_json(data),
            created_at=parse_dt(data.get("created_at")),
            updated_at=parse_dt(data.get("updated_at")),
        )


@dataclass(frozen=True)
class TeamDefaults:
    """The team's delivery defaults (and the service's retry policy under them)."""

    slug: str
    name: str
    retry: JobRetry | None
    default_on_failure_url: str | None
    service_retry: JobRetry | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TeamDefaults:
        return cls(
            slug=data["slug"],
            name=data.get("name", ""),
            retry=JobRetry.from_json(data.get("retry")),
            default_on_failure_url=data.get("default_on_failure_url"),
            service_retry=JobRetry.from_json(data.get("service_retry")),
        )


@dataclass(frozen=True)
class Endpoint:
    """One endpoint of a topic; header values read masked."""

    id: str
    url: str
    state: str = "enabled"  # or "disabled": its deliveries wait
    flow_control_key: str | None = None
    delivery_key: str = ""  # the flow-control key its deliveries carry
    delivery: Delivery = field(default_factory=Delivery)
    disabled_at: datetime | None = None
    disabled_reason: str = ""
    failing_since: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Endpoint:
        return cls(
            id=data["id"],
            url=data["url"],
            state=data.get("state", "enabled"),
            flow_control_key=data.get("flow_control_key"),
            delivery_key=data.get("delivery_key", ""),
            delivery=Delivery.from_json(data),
            disabled_at=parse_dt(data.get("disabled_at")),
            disabled_reason=data.get("disabled_reason") or "",
            failing_since=parse_dt(data.get("failing_since")),
            created_at=parse_dt(data.get("created_at")),
            updated_at=parse_dt(data.get("updated_at")),
        )


@dataclass(frozen=True)
class Topic:
    """A team's topic: a job naming it goes to each endpoint enabled at its due time."""

    name: str
    endpoints: list[Endpoint] = field(default_factory=list)
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Topic:
        return cls(
            name=data["name"],
            endpoints=[Endpoint.from_json(e) for e in data.get("endpoints", [])],
            created_at=parse_dt(data.get("created_at")),
            updated_at=parse_dt(data.get("updated_at")),
        )
