"""Client and AsyncClient: the same methods, blocking and async."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import httpx

from . import _calls
from ._calls import Call
from ._retry import RETRY_STATUSES, RetryPolicy, retry_after_of
from .errors import TransportError, error_for
from .models import (
    Attempt,
    Endpoint,
    FlowControl,
    Job,
    JobFields,
    JobRetry,
    Schedule,
    TeamDefaults,
    Topic,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack  # noqa: UP035 (the client runs on Python 3.10)

_UNSET: Any = _calls._UNSET

DEFAULT_TIMEOUT_SECONDS = 10.0


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "User-Agent": "sendlater-client/0.1"}


def _answer(call: Call, response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = response.text
        raise error_for(response.status_code, body, retry_after_of(response))
    return call.parse(response.json() if response.content else None)


class Client:
    """Blocking client. ``Client(base_url, api_key)``; use as a context manager or ``close()``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=_headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def request(self, call: Call) -> Any:
        """Send one call, retrying network errors, 429 and 5xx gateways with backoff."""
        for attempt in range(1, self.retry.attempts + 1):
            last = attempt == self.retry.attempts
            try:
                response = self._http.request(
                    call.method, call.path, json=call.json, params=call.params
                )
            except httpx.TransportError as exc:
                if last:
                    raise TransportError(str(exc) or type(exc).__name__) from exc
                time.sleep(self.retry.delay(attempt, None))
                continue
            if response.status_code in RETRY_STATUSES and not last:
                time.sleep(self.retry.delay(attempt, retry_after_of(response)))
                continue
            return _answer(call, response)
        raise AssertionError("unreachable")

    def schedule(self, due_at: datetime | str, **job: Unpack[JobFields]) -> Job:
        return self.request(_calls.schedule(due_at=due_at, **job))

    def schedule_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[Job]:
        out: list[Job] = []
        for call in _calls.schedule_chunks(jobs):
            out.extend(self.request(call))
        return out

    def get(self, job_id: Any) -> Job:
        return self.request(_calls.get(job_id))

    def list(self, **filters: Any) -> Iterator[Job]:
        cursor = None
        while True:
            jobs, cursor = self.request(_calls.list_page(cursor=cursor, **filters))
            yield from jobs
            if not cursor:
                return

    def reschedule(self, job_id: Any, due_at: datetime | str, payload: Any = None) -> Job:
        return self.request(_calls.reschedule(job_id, due_at, payload))

    def cancel(self, job_id: Any) -> Job:
        return self.request(_calls.cancel(job_id))

    def cancel_many(
        self, ids: Iterable[Any] | None = None, metadata: Mapping[str, str] | None = None
    ) -> int:
        return self.request(_calls.cancel_many(ids, metadata))

    def attempts(self, job_id: Any) -> list[Attempt]:
        return self.request(_calls.attempts(job_id))

    def requeue(self, job_id: Any) -> Job:
        return self.request(_calls.requeue(job_id))

    def set_flow_control(
        self,
        key: str,
        *,
        rate: int | None = None,
        period_seconds: int | None = None,
        parallelism: int | None = None,
    ) -> FlowControl:
        return self.request(
            _calls.flow_control_set(
                key, rate=rate, period_seconds=period_seconds, parallelism=parallelism
            )
        )

    def get_flow_control(self, key: str) -> FlowControl:
        return self.request(_calls.flow_control_get(key))

    def list_flow_controls(self, *, limit: int | None = None) -> Iterator[FlowControl]:
        cursor = None
        while True:
            flows, cursor = self.request(_calls.flow_control_list_page(limit=limit, cursor=cursor))
            yield from flows
            if not cursor:
                return

    def delete_flow_control(self, key: str) -> None:
        self.request(_calls.flow_control_delete(key))

    def pause_flow_control(self, key: str) -> FlowControl:
        return self.request(_calls.flow_control_pause(key))

    def resume_flow_control(self, key: str) -> FlowControl:
        return self.request(_calls.flow_control_resume(key))

    def set_topic(self, name: str, endpoints: Mapping[str, Mapping[str, Any]]) -> Topic:
        """Create or replace a topic: endpoint id -> {"url": ..., "headers": ..., ...}."""
        return self.request(_calls.topic_set(name, endpoints))

    def get_topic(self, name: str) -> Topic:
        return self.request(_calls.topic_get(name))

    def list_topics(self, *, limit: int | None = None) -> Iterator[Topic]:
        cursor = None
        while True:
            topics, cursor = self.request(_calls.topic_list_page(limit=limit, cursor=cursor))
            yield from topics
            if not cursor:
                return

    def delete_topic(self, name: str) -> None:
        self.request(_calls.topic_delete(name))

    def set_endpoint(self, topic: str, endpoint: str, **fields: Any) -> Endpoint:
        return self.request(_calls.endpoint_set(topic, endpoint, **fields))

    def update_endpoint(self, topic: str, endpoint: str, **changes: Any) -> Endpoint:
        """Change the fields given; the others (header values too) are kept."""
        return self.request(_calls.endpoint_update(topic, endpoint, **changes))

    def delete_endpoint(self, topic: str, endpoint: str) -> None:
        self.request(_calls.endpoint_delete(topic, endpoint))

    def disable_endpoint(self, topic: str, endpoint: str, reason: str | None = None) -> Endpoint:
        return self.request(_calls.endpoint_disable(topic, endpoint, reason))

    def enable_endpoint(self, topic: str, endpoint: str) -> Endpoint:
        return self.request(_calls.endpoint_enable(topic, endpoint))

    def create_schedule(
        self, *, cron: str | None = None, every_seconds: int | None = None, **fields: Any
    ) -> Schedule:
        """A recurring schedule (``cron`` or ``every_seconds``); the job fields and the
        delivery contract's (``DeliveryFields``) are copied to every occurrence."""
        return self.request(
            _calls.schedule_create(cron=cron, every_seconds=every_seconds, **fields)
        )

    def get_schedule(self, schedule_id: Any) -> Schedule:
        return self.request(_calls.schedule_get(schedule_id))

    def list_schedules(self, *, limit: int | None = None) -> Iterator[Schedule]:
        cursor = None
        while True:
            found, cursor = self.request(_calls.schedule_list_page(limit=limit, cursor=cursor))
            yield from found
            if not cursor:
                return

    def update_schedule(self, schedule_id: Any, **changes: Any) -> Schedule:
        return self.request(_calls.schedule_update(schedule_id, **changes))

    def delete_schedule(self, schedule_id: Any) -> None:
        self.request(_calls.schedule_delete(schedule_id))

    def pause_schedule(self, schedule_id: Any) -> Schedule:
        return self.request(_calls.schedule_pause(schedule_id))

    def resume_schedule(self, schedule_id: Any) -> Schedule:
        return self.request(_calls.schedule_resume(schedule_id))

    def schedule_occurrences(self, schedule_id: Any, count: int | None = None) -> list[datetime]:
        return self.request(_calls.schedule_occurrences(schedule_id, count))

    def get_team(self) -> TeamDefaults:
        return self.request(_calls.team_get())

    def update_team(
        self,
        *,
        retry: JobRetry | dict[str, int] | None = _UNSET,
        default_on_failure_url: str | None = _UNSET,
    ) -> TeamDefaults:
        """Set the team's retry defaults and default failure callback (None clears)."""
        return self.request(
            _calls.team_update(retry=retry, default_on_failure_url=default_on_failure_url)
        )


class AsyncClient:
    """The same methods as Client, awaited; ``list`` is an async iterator."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=_headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def request(self, call: Call) -> Any:
        for attempt in range(1, self.retry.attempts + 1):
            last = attempt == self.retry.attempts
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.json, params=call.params
                )
            except httpx.TransportError as exc:
                if last:
                    raise TransportError(str(exc) or type(exc).__name__) from exc
                await asyncio.sleep(self.retry.delay(attempt, None))
                continue
            if response.status_code in RETRY_STATUSES and not last:
                await asyncio.sleep(self.retry.delay(attempt, retry_after_of(response)))
                continue
            return _answer(call, response)
        raise AssertionError("unreachable")

    async def schedule(self, due_at: datetime | str, **job: Unpack[JobFields]) -> Job:
        return await self.request(_calls.schedule(due_at=due_at, **job))

    async def schedule_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[Job]:
        out: list[Job] = []
        for call in _calls.schedule_chunks(jobs):
            out.extend(await self.request(call))
        return out

    async def get(self, job_id: Any) -> Job:
        return await self.request(_calls.get(job_id))

    async def list(self, **filters: Any) -> AsyncIterator[Job]:
        cursor = None
        while True:
            jobs, cursor = await self.request(_calls.list_page(cursor=cursor, **filters))
            for job in jobs:
                yield job
            if not cursor:
                return

    async def reschedule(self, job_id: Any, due_at: datetime | str, payload: Any = None) -> Job:
        return await self.request(_calls.reschedule(job_id, due_at, payload))

    async def cancel(self, job_id: Any) -> Job:
        return await self.request(_calls.cancel(job_id))

    async def cancel_many(
        self, ids: Iterable[Any] | None = None, metadata: Mapping[str, str] | None = None
    ) -> int:
        return await self.request(_calls.cancel_many(ids, metadata))

    async def attempts(self, job_id: Any) -> list[Attempt]:
        return await self.request(_calls.attempts(job_id))

    async def requeue(self, job_id: Any) -> Job:
        return await self.request(_calls.requeue(job_id))

    async def set_flow_control(
        self,
        key: str,
        *,
        rate: int | None = None,
        period_seconds: int | None = None,
        parallelism: int | None = None,
    ) -> FlowControl:
        return await self.request(
            _calls.flow_control_set(
                key, rate=rate, period_seconds=period_seconds, parallelism=parallelism
            )
        )

    async def get_flow_control(self, key: str) -> FlowControl:
        return await self.request(_calls.flow_control_get(key))

    async def list_flow_controls(self, *, limit: int | None = None) -> AsyncIterator[FlowControl]:
        cursor = None
        while True:
            call = _calls.flow_control_list_page(limit=limit, cursor=cursor)
            flows, cursor = await self.request(call)
            for flow in flows:
                yield flow
            if not cursor:
                return

    async def delete_flow_control(self, key: str) -> None:
        await self.request(_calls.flow_control_delete(key))

    async def pause_flow_control(self, key: str) -> FlowControl:
        return await self.request(_calls.flow_control_pause(key))

    async def resume_flow_control(self, key: str) -> FlowControl:
        return await self.request(_calls.flow_control_resume(key))

    async def set_topic(self, name: str, endpoints: Mapping[str, Mapping[str, Any]]) -> Topic:
        return await self.request(_calls.topic_set(name, endpoints))

    async def get_topic(self, name: str) -> Topic:
        return await self.request(_calls.topic_get(name))

    async def list_topics(self, *, limit: int | None = None) -> AsyncIterator[Topic]:
        cursor = None
        while True:
            topics, cursor = await self.request(_calls.topic_list_page(limit=limit, cursor=cursor))
            for topic in topics:
                yield topic
            if not cursor:
                return

    async def delete_topic(self, name: str) -> None:
        await self.request(_calls.topic_delete(name))

    async def set_endpoint(self, topic: str, endpoint: str, **fields: Any) -> Endpoint:
        return await self.request(_calls.endpoint_set(topic, endpoint, **fields))

    async def update_endpoint(self, topic: str, endpoint: str, **changes: Any) -> Endpoint:
        return await self.request(_calls.endpoint_update(topic, endpoint, **changes))

    async def delete_endpoint(self, topic: str, endpoint: str) -> None:
        await self.request(_calls.endpoint_delete(topic, endpoint))

    async def disable_endpoint(
        self, topic: str, endpoint: str, reason: str | None = None
    ) -> Endpoint:
        return await self.request(_calls.endpoint_disable(topic, endpoint, reason))

    async def enable_endpoint(self, topic: str, endpoint: str) -> Endpoint:
        return await self.request(_calls.endpoint_enable(topic, endpoint))

    async def create_schedule(
        self, *, cron: str | None = None, every_seconds: int | None = None, **fields: Any
    ) -> Schedule:
        return await self.request(
            _calls.schedule_create(cron=cron, every_seconds=every_seconds, **fields)
        )

    async def get_schedule(self, schedule_id: Any) -> Schedule:
        return await self.request(_calls.schedule_get(schedule_id))

    async def list_schedules(self, *, limit: int | None = None) -> AsyncIterator[Schedule]:
        cursor = None
        while True:
            call = _calls.schedule_list_page(limit=limit, cursor=cursor)
            found, cursor = await self.request(call)
            for schedule in found:
                yield schedule
            if not cursor:
                return

    async def update_schedule(self, schedule_id: Any, **changes: Any) -> Schedule:
        return await self.request(_calls.schedule_update(schedule_id, **changes))

    async def delete_schedule(self, schedule_id: Any) -> None:
        await self.request(_calls.schedule_delete(schedule_id))

    async def pause_schedule(self, schedule_id: Any) -> Schedule:
        return await self.request(_calls.schedule_pause(schedule_id))

    async def resume_schedule(self, schedule_id: Any) -> Schedule:
        return await self.request(_calls.schedule_resume(schedule_id))

    async def schedule_occurrences(
        self, schedule_id: Any, count: int | None = None
    ) -> list[datetime]:
        return await self.request(_calls.schedule_occurrences(schedule_id, count))

    async def get_team(self) -> TeamDefaults:
        return await self.request(_calls.team_get())

    async def update_team(
        self,
        *,
        retry: JobRetry | dict[str, int] | None = _UNSET,
        default_on_failure_url: str | None = _UNSET,
    ) -> TeamDefaults:
        return await self.request(
            _calls.team_update(retry=retry, default_on_failure_url=default_on_failure_url)
        )
