"""What is heard after an outcome: callback jobs and kept responses, written in the
write-back's transaction (``polling.engine.write_group.WriteGroup.write``).

A job that asked (``on_success_url``; ``on_failure_url``, or its team's
``default_on_failure_url``, when it ends dead or expired) gets a callback: a webhook job
of its own, due now, whose body is the event (``job.delivered``, ``job.dead``,
``job.expired``: the job's id, status, attempts, metadata, schedule id and last
response). It is written in the transaction that writes the outcome, for the rows the
fenced write-back changed only: none is lost (a crash before the commit loses the
outcome too, and the job is delivered again), none is sent for an outcome fenced out.
A callback job never has a callback of its own. The parent names its callbacks
(``request.callbacks``: event -> job id), and keeps its response where it asked
(``capture_response``), in one statement for the group.

Default-shape jobs cost one pass over the group: no query unless a job asked, or a
job ended dead or expired (its team's default failure URL is read then).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import transaction

from polling.common.failpoints import failpoint
from polling.common.sql import dt, id_in, is_postgres, placeholders, rowcount, uid
from polling.common.wakeups import due_now_written
from polling.dispatch.base import ClaimedJob, Outcome
from polling.writing.writeback import Result, by_primary_key
from scheduling import keys
from scheduling.models import JobStatus, Team
from scheduling.sharding.buckets import shard_counts_record
from scheduling.sharding.clock import iso_utc, open_bucket
from scheduling.storage.jobinsert import JobBuilder, jobs_insert, new_job_ids

EVENTS = {"delivered": "job.delivered", "dead": "job.dead", "expired": "job.expired"}
EXCERPT_CHARS = 1024
CALLBACK_OF = "callback_of"  # the stored request's mark of a callback job (never called back)

# PostgreSQL: each row's values from one JSON object keyed by id (a one-row join), by
# the primary key (``writeback.by_primary_key``), as the write-back's delivered rows.
# A join to VALUES was planned, in a partition filled seconds before (no statistics),
# as a nested loop scanning the whole partition once per row: 12 s for one topic
# group's parents (bench/topics.py, 2026-12-07), the poller's leases lost meanwhile.
_EXTRAS_PG_SQL = """
UPDATE scheduling_job AS j SET
    request = COALESCE(NULLIF(d.m -> j.id::text -> 0, 'null'::jsonb), j.request),
    response = COALESCE(NULLIF(d.m -> j.id::text -> 1, 'null'::jsonb), j.response)
FROM (SELECT %s::jsonb AS m) AS d
WHERE j.bucket IN ({buckets}) AND j.id {ids}
"""
_EXTRAS_SQLITE_SQL = """
WITH v (v_id, v_bucket, v_request, v_response) AS (VALUES {rows})
UPDATE scheduling_job AS j SET
    request = COALESCE(v.v_request, j.request), response = COALESCE(v.v_response, j.response)
FROM v
WHERE j.bucket IN ({buckets}) AND j.id {ids} AND j.id = v.v_id AND j.bucket = v.v_bucket
"""


def outcomes_heard(
    *,
    jobs: Sequence[ClaimedJob],
    outcomes: Sequence[Outcome],
    expired: Sequence[ClaimedJob],
    results: Sequence[Result],
    written: Collection[UUID],
    now: datetime,
) -> int:
    """Write the callback jobs and kept responses of a written group; return the
    callbacks written. Call inside the write-back's transaction, after it."""
    asked = any(_asks(job.request) for job in jobs) or any(_asks(job.request) for job in expired)
    if not asked and not any(r.status == "dead" or r.status == "expired" for r in results):
        return 0  # the common group: default-shape jobs, delivered or retried
    finals = [r for r in results if r.status in EVENTS and r.job_id in written]
    if not finals:
        return 0
    by_id = {job.id: job for job in (*jobs, *expired)}
    heard = {o.job_id: o for o in outcomes}
    failure_urls = team_failure_urls(
        {by_id[r.job_id].team_id for r in finals if r.status != "delivered"}
    )
    calls: list[tuple[ClaimedJob, Result, str, dict[str, Any]]] = []
    extras: dict[UUID, tuple[Result, dict[str, Any] | None, dict[str, Any] | None]] = {}
    for result in finals:
        job = by_id[result.job_id]
        request = job.request or {}
        if CALLBACK_OF in request:
            continue  # a callback is never called back
        if result.status == "delivered":
            url = request.get("on_success_url")
            capture = request.get("capture_response")
        else:
            url = request.get("on_failure_url") or failure_urls.get(job.team_id)
            capture = False
        if not url and not capture:
            continue  # asked for nothing to be heard
        last = _last_response(heard.get(job.id))
        if capture and last is not None:
            extras[job.id] = (result, None, last)
        if url:
            calls.append((job, result, url, _event(job, result, last)))
    if calls:
        ids = _callbacks_insert(calls, now)
        for (job, result, _url, event), callback_id in zip(calls, ids, strict=True):
            named = {**(job.request or {})}
            named["callbacks"] = {**named.get("callbacks", {}), event["type"]: str(callback_id)}
            response = extras.get(job.id, (None, None, None))[2]
            extras[job.id] = (result, named, response)
    if extras:
        extras_write(list(extras.values()))
    if calls:  # fault tests: die with the callbacks committed, none delivered yet
        transaction.on_commit(lambda: failpoint("callbacks_committed"))
    return len(calls)


def _asks(request: dict[str, Any] | None) -> bool:
    """Whether a job's stored request asks to hear its outcome (a callback, a kept
    response): a request that only shapes the call (method, headers, format) does not."""
    return request is not None and (
        "on_success_url" in request or "on_failure_url" in request or "capture_response" in request
    )


def team_failure_urls(team_ids: set[int]) -> dict[int, str]:
    if not team_ids:
        return {}
    rows = Team.objects.filter(id__in=team_ids).exclude(default_on_failure_url="")
    return dict(rows.values_list("id", "default_on_failure_url"))


def _last_response(outcome: Outcome | None) -> dict[str, Any] | None:
    if outcome is None or outcome.status_code is None:
        return None
    return {
        "status_code": outcome.status_code,
        "content_type": outcome.content_type or None,
        "body_excerpt": (outcome.excerpt or "")[:EXCERPT_CHARS],
        "duration_ms": None
        if outcome.duration_seconds is None
        else round(outcome.duration_seconds * 1000),
    }


def _event(job: ClaimedJob, result: Result, last: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "type": EVENTS[result.status],
        "job_id": str(job.id),
        "status": result.status,
        "attempts": job.attempt,
        "metadata": job.metadata,
        "schedule_id": None if job.schedule_id is None else str(job.schedule_id),
        "scheduled_for": None if job.scheduled_for is None else iso_utc(job.scheduled_for),
        "error": result.last_error or None,
        "last_response": last,
    }


def _callbacks_insert(
    calls: Sequence[tuple[ClaimedJob, Result, str, dict[str, Any]]], now: datetime
) -> list[UUID]:
    """The callback jobs, due now in the open bucket, one COPY (or INSERT) for all."""
    return events_insert(
        [(job.team_id, str(job.id), url, event) for job, _, url, event in calls], now
    )


def events_insert(
    events: Sequence[tuple[int, str, str, dict[str, Any]]], now: datetime
) -> list[UUID]:
    """Event jobs (team id, what the event is about, URL, the event): signed webhooks of
    the event alone, due now in the open bucket, never called back; one COPY for all."""
    place = open_bucket(now)
    counts = shard_counts_record([place])
    ids = new_job_ids(len(events))
    builders: dict[int, JobBuilder] = {}
    jobs = []
    shards = set()
    for (team_id, about, url, event), callback_id in zip(events, ids, strict=True):
        builder = builders.get(team_id)
        if builder is None:
            builder = builders[team_id] = JobBuilder(
                team=Team(pk=team_id),
                status=JobStatus.PENDING,
                created_at=now,
                updated_at=now,
                idempotency_key=None,
                request_fingerprint="",
            )
        jobs.append(
            builder.build(
                {
                    "id": callback_id,
                    "due_at": now,
                    "bucket": place,
                    "shard": (shard := keys.shard_of(callback_id, counts[place])),
                    "target_kind": "webhook",
                    "target": url,
                    "payload": event,
                    "metadata": {CALLBACK_OF: about, "event": event["type"]},
                    "request": {"format": "payload", CALLBACK_OF: about},
                }
            )
        )
        shards.add(shard)
    jobs_insert(jobs)
    due_now_written(shards)  # their shards' owners read them at once
    return ids


def extras_write(
    rows: Sequence[tuple[Result, dict[str, Any] | None, dict[str, Any] | None]],
) -> None:
    """The parents' named callbacks and kept responses: one UPDATE by id and bucket."""
    buckets = sorted({r.bucket for r, _, _ in rows})
    in_ids, id_params = id_in([r.job_id for r, _, _ in rows])
    bucket_params = [dt(b) for b in buckets]
    if is_postgres():
        values = {str(result.job_id): (request, response) for result, request, response in rows}
        sql = _EXTRAS_PG_SQL.format(buckets=placeholders(len(buckets)), ids=in_ids)
        with by_primary_key():
            rowcount(sql, [json.dumps(values, separators=(",", ":")), *bucket_params, *id_params])
        return
    params: list[Any] = []
    for result, request, response in rows:
        params += (
            uid(result.job_id),
            dt(result.bucket),
            None if request is None else json.dumps(request, separators=(",", ":")),
            None if response is None else json.dumps(response, separators=(",", ":")),
        )
    sql = _EXTRAS_SQLITE_SQL.format(
        rows=", ".join(["(%s, %s, %s, %s)"] * len(rows)),
        buckets=placeholders(len(buckets)),
        ids=in_ids,
    )
    rowcount(sql, [*params, *bucket_params, *id_params])
