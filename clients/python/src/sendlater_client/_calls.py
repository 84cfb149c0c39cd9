"""The request layer shared by Client and AsyncClient.

Each API call is described once here as a ``Call`` (method, path, body, query, and
how to read the answer); the two clients only differ in how they send it. A new
endpoint (schedules, flow control) is one builder function and a one-line method in
each client.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from .models import (
    Attempt,
    Endpoint,
    FlowControl,
    Job,
    JobRetry,
    Schedule,
    TeamDefaults,
    Topic,
    format_dt,
)

BULK_MAX_JOBS = 1000  # the API's limit per POST /api/v1/jobs/bulk
# The delivery contract: what a job sends, how it retries, who hears its outcome.
DELIVERY_FIELDS = (
    "method",
    "headers",
    "format",
    "content_type",
    "timeout_seconds",
    "retry",
    "on_success_url",
    "on_failure_url",
    "capture_response",
)
JOB_FIELDS = (
    "due_at",
    "callback_url",
    "handler",
    "topic",
    "payload",
    "metadata",
    "idempotency_key",
    "window_seconds",
    "expires_after_seconds",
    "flow_control_key",
    *DELIVERY_FIELDS,
)
SCHEDULE_FIELDS = (
    "cron",
    "every_seconds",
    "timezone",
    "callback_url",
    "handler",
    "topic",
    "payload",
    "metadata",
    "window_seconds",
    "expires_after_seconds",
    "start_at",
    "end_at",
    "missed",
    "flow_control_key",
    *DELIVERY_FIELDS,
)


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    parse: Callable[[Any], Any]
    json: Any = None
    params: list[tuple[str, str]] | None = None


def new_idempotency_key() -> str:
    # Makes a create safe to retry: the server answers a replay with the first job.
    return f"slc-{uuid.uuid4()}"


def job_body(job: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(job) - set(JOB_FIELDS)
    if unknown:
        raise TypeError(f"unknown job fields: {sorted(unknown)}")
    body = {k: v for k, v in job.items() if v is not None}
    if "due_at" not in body:
        raise TypeError("a job needs due_at")
    if isinstance(body.get("retry"), JobRetry):
        body["retry"] = body["retry"].to_json()
    body["due_at"] = format_dt(body["due_at"])
    body.setdefault("idempotency_key", new_idempotency_key())
    return body


def _path_id(job_id: Any) -> str:
    return str(job_id)


def schedule(**job: Any) -> Call:
    return Call("POST", "/api/v1/jobs", Job.from_json, json=job_body(job))


def schedule_chunks(jobs: Iterable[Mapping[str, Any]]) -> Iterable[Call]:
    """Bulk calls of up to BULK_MAX_JOBS jobs, each job with its idempotency key."""
    chunk: list[dict[str, Any]] = []
    for job in jobs:
        chunk.append(job_body(job))
        if len(chunk) == BULK_MAX_JOBS:
            yield _bulk(chunk)
            chunk = []
    if chunk:
        yield _bulk(chunk)


def _bulk(chunk: list[dict[str, Any]]) -> Call:
    return Call(
        "POST",
        "/api/v1/jobs/bulk",
        lambda data: [Job.from_json(j) for j in data["jobs"]],
        json={"jobs": chunk},
    )


def get(job_id: Any) -> Call:
    return Call("GET", f"/api/v1/jobs/{_path_id(job_id)}", Job.from_json)


def list_page(
    *,
    status: str | None = None,
    due_after: datetime | str | None = None,
    due_before: datetime | str | None = None,
    metadata: Mapping[str, str] | None = None,
    flow_control_key: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call:
    params: list[tuple[str, str]] = []
    if status is not None:
        params.append(("status", status))
    if due_after is not None:
        params.append(("due_after", format_dt(due_after)))
    if due_before is not None:
        params.append(("due_before", format_dt(due_before)))
    for key, value in (metadata or {}).items():
        params.append(("metadata", f"{key}={value}"))
    if flow_control_key is not None:
        params.append(("flow_control_key", flow_control_key))
    if limit is not None:
        params.append(("limit", str(limit)))
    if cursor is not None:
        params.append(("cursor", cursor))
    return Call(
        "GET",
        "/api/v1/jobs",
        lambda data: ([Job.from_json(j) for j in data["results"]], data.get("next_cursor")),
        params=params,
    )


def reschedule(job_id: Any, due_at: datetime | str, payload: Any = None) -> Call:
    body: dict[str, Any] = {"due_at": format_dt(due_at)}
    if payload is not None:
        body["payload"] = payload
    return Call("PATCH", f"/api/v1/jobs/{_path_id(job_id)}", Job.from_json, json=body)


def cancel(job_id: Any) -> Call:
    return Call("POST", f"/api/v1/jobs/{_path_id(job_id)}/cancel", Job.from_json)


def cancel_many(
    ids: Iterable[Any] | None = None, metadata: Mapping[str, str] | None = None
) -> Call:
    body: dict[str, Any] = {}
    if ids is not None:
        body["ids"] = [str(i) for i in ids]
    if metadata is not None:
        body["metadata"] = dict(metadata)
    return Call("POST", "/api/v1/jobs/cancel", lambda data: int(data["canceled"]), json=body)


def attempts(job_id: Any) -> Call:
    return Call(
        "GET",
        f"/api/v1/jobs/{_path_id(job_id)}/attempts",
        lambda data: [Attempt.from_json(a) for a in data["attempts"]],
    )


def requeue(job_id: Any) -> Call:
    return Call("POST", f"/api/v1/jobs/{_path_id(job_id)}/requeue", Job.from_json)


def _flow_path(key: str) -> str:
    # Every character escaped: a key may hold "?", "#", "%" or spaces (never "/").
    return f"/api/v1/flow-controls/{quote(key, safe='')}"


def flow_control_set(
    key: str,
    *,
    rate: int | None = None,
    period_seconds: int | None = None,
    parallelism: int | None = None,
) -> Call:
    body = {
        name: value
        for name, value in (
            ("rate", rate),
            ("period_seconds", period_seconds),
            ("parallelism", parallelism),
        )
        if value is not None
    }
    return Call("PUT", _flow_path(key), FlowControl.from_json, json=body)


def flow_control_get(key: str) -> Call:
    return Call("GET", _flow_path(key), FlowControl.from_json)


def _list_page(
    path: str, parse: Callable[[Any], Any], *, limit: int | None, cursor: str | None
) -> Call:
    """A page of a list ordered by key or time: its items and the next cursor."""
    params: list[tuple[str, str]] = []
    if limit is not None:
        params.append(("limit", str(limit)))
    if cursor is not None:
        params.append(("cursor", cursor))
    return Call(
        "GET",
        path,
        lambda data: ([parse(item) for item in data["results"]], data.get("next_cursor")),
        params=params,
    )


def flow_control_list_page(*, limit: int | None = None, cursor: str | None = None) -> Call:
    return _list_page("/api/v1/flow-controls", FlowControl.from_json, limit=limit, cursor=cursor)


def flow_control_delete(key: str) -> Call:
    return Call("DELETE", _flow_path(key), lambda data: None)


def flow_control_pause(key: str) -> Call:
    return Call("POST", f"{_flow_path(key)}/pause", FlowControl.from_json)


def flow_control_resume(key: str) -> Call:
    return Call("POST", f"{_flow_path(key)}/resume", FlowControl.from_json)


# --- topics ----------------------------------------------------------------------

# An endpoint's fields besides its id: its URL, what it sends, its key and its state.
ENDPOINT_FIELDS = (
    "url",
    "method",
    "headers",
    "format",
    "content_type",
    "timeout_seconds",
    "retry",
    "flow_control_key",
    "state",
)


def _endpoint_body(fields: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(fields) - set(ENDPOINT_FIELDS)
    if unknown:
        raise TypeError(f"unknown endpoint fields: {sorted(unknown)}")
    body = {k: v for k, v in fields.items() if v is not None}
    if isinstance(body.get("retry"), JobRetry):
        body["retry"] = body["retry"].to_json()
    return body


def _topic_path(name: str, endpoint: str | None = None) -> str:
    path = f"/api/v1/topics/{quote(name, safe='')}"
    return path if endpoint is None else f"{path}/endpoints/{quote(endpoint, safe='')}"


def topic_set(name: str, endpoints: Mapping[str, Mapping[str, Any]]) -> Call:
    body = {"endpoints": {eid: _endpoint_body(e) for eid, e in endpoints.items()}}
    return Call("PUT", _topic_path(name), Topic.from_json, json=body)


def topic_get(name: str) -> Call:
    return Call("GET", _topic_path(name), Topic.from_json)


def topic_list_page(*, limit: int | None = None, cursor: str | None = None) -> Call:
    return _list_page("/api/v1/topics", Topic.from_json, limit=limit, cursor=cursor)


def topic_delete(name: str) -> Call:
    return Call("DELETE", _topic_path(name), lambda data: None)


def endpoint_set(name: str, endpoint: str, **fields: Any) -> Call:
    return Call("PUT", _topic_path(name, endpoint), Endpoint.from_json, json=_endpoint_body(fields))


def endpoint_update(name: str, endpoint: str, **changes: Any) -> Call:
    return Call(
        "PATCH", _topic_path(name, endpoint), Endpoint.from_json, json=_endpoint_body(changes)
    )


def endpoint_delete(name: str, endpoint: str) -> Call:
    return Call("DELETE", _topic_path(name, endpoint), lambda data: None)


def endpoint_disable(name: str, endpoint: str, reason: str | None = None) -> Call:
    body = {} if reason is None else {"reason": reason}
    return Call("POST", f"{_topic_path(name, endpoint)}/disable", Endpoint.from_json, json=body)


def endpoint_enable(name: str, endpoint: str) -> Call:
    return Call("POST", f"{_topic_path(name, endpoint)}/enable", Endpoint.from_json)


# --- recurring schedules -------------------------------------------------------


def _schedule_body(fields: Mapping[str, Any], *, patch: bool = False) -> dict[str, Any]:
    unknown = set(fields) - set(SCHEDULE_FIELDS)
    if unknown:
        raise TypeError(f"unknown schedule fields: {sorted(unknown)}")
    # A PATCH keeps explicit nulls (they clear a value); a create leaves them out.
    body = {k: v for k, v in fields.items() if patch or v is not None}
    for name in ("start_at", "end_at"):
        if body.get(name) is not None:
            body[name] = format_dt(body[name])
    if isinstance(body.get("retry"), JobRetry):
        body["retry"] = body["retry"].to_json()
    return body


def _schedule_path(schedule_id: Any) -> str:
    return f"/api/v1/schedules/{schedule_id}"


def schedule_create(**fields: Any) -> Call:
    return Call("POST", "/api/v1/schedules", Schedule.from_json, json=_schedule_body(fields))


def schedule_get(schedule_id: Any) -> Call:
    return Call("GET", _schedule_path(schedule_id), Schedule.from_json)


def schedule_list_page(*, limit: int | None = None, cursor: str | None = None) -> Call:
    return _list_page("/api/v1/schedules", Schedule.from_json, limit=limit, cursor=cursor)


def schedule_update(schedule_id: Any, **changes: Any) -> Call:
    body = _schedule_body(changes, patch=True)
    return Call("PATCH", _schedule_path(schedule_id), Schedule.from_json, json=body)


def schedule_delete(schedule_id: Any) -> Call:
    return Call("DELETE", _schedule_path(schedule_id), lambda data: None)


def schedule_pause(schedule_id: Any) -> Call:
    return Call("POST", f"{_schedule_path(schedule_id)}/pause", Schedule.from_json)


def schedule_resume(schedule_id: Any) -> Call:
    return Call("POST", f"{_schedule_path(schedule_id)}/resume", Schedule.from_json)


def schedule_occurrences(schedule_id: Any, count: int | None = None) -> Call:
    params = [("count", str(count))] if count is not None else []
    return Call(
        "GET",
        f"{_schedule_path(schedule_id)}/occurrences",
        lambda data: [
            datetime.fromisoformat(v.replace("Z", "+00:00")) for v in data["occurrences"]
        ],
        params=params,
    )


# --- the team's delivery defaults ----------------------------------------------

_UNSET: Any = object()


def team_get() -> Call:
    return Call("GET", "/api/v1/team", TeamDefaults.from_json)


def team_update(*, retry: Any = _UNSET, default_on_failure_url: Any = _UNSET) -> Call:
    body: dict[str, Any] = {}
    if retry is not _UNSET:
        body["retry"] = retry.to_json() if isinstance(retry, JobRetry) else retry
    if default_on_failure_url is not _UNSET:
        body["default_on_failure_url"] = default_on_failure_url
    return Call("PATCH", "/api/v1/team", TeamDefaults.from_json, json=body)
