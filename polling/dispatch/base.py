"""The sink interface: what a poller hands to a delivery target and gets back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol
from uuid import UUID


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    id: UUID
    team_id: int
    due_at: datetime
    bucket: datetime
    shard: int
    attempt: int
    target_kind: str
    target: str
    payload: Any
    metadata: dict[str, str]
    expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class Outcome:
    job_id: UUID
    result: Literal["delivered", "retry", "dead"]
    error: str = ""
    status_code: int | None = None
    retry_after_seconds: float | None = None
    started_at: datetime | None = None
    duration_seconds: float | None = None


class Sink(Protocol):
    def deliver(self, jobs: Sequence[ClaimedJob]) -> list[Outcome]: ...

    def close(self) -> None: ...
