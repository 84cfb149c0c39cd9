"""Writes: schedule, cancel and reschedule jobs.

Elsewhere: cutovers in ``scheduling.cutovers``, bulk cancel in ``scheduling.cancels``,
dead-letter requeue in ``scheduling.deadletters``.

Every service is keyword-only and transactional. Where a job lands:
``bucket = max(bucket_of(due_at), open_bucket(now))`` and
``shard = shard_of(id, S_bucket)`` with the bucket's recorded count.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction

from scheduling import conf, handlers, keys, netguard
from scheduling.buckets import shard_counts_record
from scheduling.clock import db_now, open_bucket

# Re-exported: callers have always imported the cutover services from here.
from scheduling.cutovers import cutover_earliest as cutover_earliest
from scheduling.cutovers import cutover_schedule as cutover_schedule
from scheduling.errors import (
    InvalidDueTime,
    InvalidTarget,
    JobNotPending,
    PayloadTooLarge,
    SchedulingError,
)
from scheduling.gcpause import gc_paused
from scheduling.idempotency import idempotency_record, is_key_violation
from scheduling.idempotency import idempotency_resolve as _resolve_idempotency
from scheduling.jobinsert import JobBuilder, jobs_insert
from scheduling.jobrows import job_for_update, job_save_in_partition
from scheduling.metrics import JOBS_SCHEDULED
from scheduling.models import Job, JobStatus, TargetKind, Team

_HANDLER_NAME = re.compile(handlers.HANDLER_NAME_PATTERN)
# json.dumps builds an encoder per call when given options; this one is reused.
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class JobSpec:
    """What a client asks for: one job to deliver at ``due_at``."""

    due_at: datetime
    target_kind: str
    target: str
    # Any JSON value but null (the column is NOT NULL).
    payload: Any = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None
    # Spread the effective due time over [due_at, due_at + window] by id hash.
    window_seconds: int = 0
    # Past due_at + this, the job ends as expired instead of firing late.
    expires_after_seconds: int | None = None

    def fingerprint(self) -> str:
        """sha256 of the canonical request, to tell an idempotent replay from a conflict."""
        body = {
            "due_at": self.due_at.astimezone(keys.EPOCH.tzinfo).isoformat(),
            "target_kind": self.target_kind,
            "target": self.target,
            "payload": self.payload,
            "metadata": self.metadata,
            "window_seconds": self.window_seconds,
            "expires_after_seconds": self.expires_after_seconds,
        }
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()


def _validate_due_at(due_at: datetime, now: datetime, latest: datetime | None = None) -> None:
    """``latest`` is ``now`` + the horizon, when the caller checks many at once."""
    if not isinstance(due_at, datetime):
        raise InvalidDueTime("due_at must be a datetime.", field="due_at")
    if due_at.tzinfo is None or due_at.tzinfo.utcoffset(due_at) is None:
        raise InvalidDueTime(
            "due_at must carry a UTC offset (for example 2027-03-01T09:00:00Z).", field="due_at"
        )
    if due_at > (latest or now + conf.max_horizon()):
        raise InvalidDueTime(
            f"due_at is more than {conf.max_horizon().days} days ahead"
            " (SENDLATER_MAX_HORIZON_DAYS).",
            field="due_at",
        )


def _validate_target(target_kind: str, target: str) -> None:
    if target_kind == TargetKind.WEBHOOK:
        if len(target) > 2048:
            raise InvalidTarget("callback_url is longer than 2048 characters.", field="target")
        parts = urlsplit(target)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidTarget("callback_url must be an absolute http(s) URL.", field="target")
        try:
            netguard.check_url(target, conf.callback_allowlist())
        except netguard.BlockedTarget as error:
            raise InvalidTarget(
                f"callback_url is not allowed: {error} (SENDLATER_CALLBACK_ALLOWLIST).",
                field="target",
            ) from error
    elif target_kind == TargetKind.HANDLER:
        if not _HANDLER_NAME.match(target or ""):
            raise InvalidTarget("handler name is not valid.", field="target")
        if not handlers.is_registered(target):
            raise InvalidTarget(
                f"unknown handler {target!r}; registered: {', '.join(handlers.names())}.",
                field="target",
            )
    else:
        raise InvalidTarget("target kind must be 'webhook' or 'handler'.", field="target_kind")


def _validate_payload(payload: Any, limit: int | None = None) -> str:
    """Check the payload; return its compact JSON (the bulk path stores this text).

    ``limit`` is SENDLATER_MAX_PAYLOAD_BYTES, when the caller checks many at once.
    """
    if payload is None:
        raise SchedulingError("payload must not be null.", field="payload")
    try:
        text = _COMPACT_JSON.encode(payload)
    except (TypeError, ValueError) as error:
        raise SchedulingError("payload must be JSON.", field="payload") from error
    size = len(text) if text.isascii() else len(text.encode())
    limit = limit if limit is not None else conf.max_payload_bytes()
    if size > limit:
        raise PayloadTooLarge(
            f"payload is {size} bytes as compact JSON; the limit is {limit} "
            "(SENDLATER_MAX_PAYLOAD_BYTES).",
            field="payload",
        )
    return text


def job_spec_validate(spec: JobSpec, *, now: datetime) -> None:
    """Raise a SchedulingError naming the field if ``spec`` cannot be scheduled."""
    _SpecChecker(now).check(spec)


class _SpecChecker:
    """``job_spec_validate`` for a batch: settings read once, each target checked once.

    A bulk request repeats the same handler or callback URL; its checks (a regex,
    the registry, URL parsing and the SSRF guard) do not depend on the rest of
    the spec, so a target that passed once passes for the whole batch.
    """

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.latest = now + conf.max_horizon()
        self.payload_limit = conf.max_payload_bytes()
        self.targets_ok: set[tuple[str, str]] = set()

    def check(self, spec: JobSpec) -> str:
        """Raise a SchedulingError naming the field; return the payload's compact JSON."""
        _validate_due_at(spec.due_at, self.now, self.latest)
        kind, target = spec.target_kind, spec.target
        if not (isinstance(kind, str) and isinstance(target, str)) or (
            (kind, target) not in self.targets_ok
        ):
            _validate_target(kind, target)
            self.targets_ok.add((kind, target))
        text = _validate_payload(spec.payload, self.payload_limit)
        if spec.window_seconds < 0:
            raise SchedulingError("window_seconds must not be negative.", field="window_seconds")
        if spec.expires_after_seconds is not None and spec.expires_after_seconds < 0:
            raise SchedulingError(
                "expires_after_seconds must not be negative.", field="expires_after_seconds"
            )
        metadata = spec.metadata
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            raise SchedulingError("metadata must map strings to strings.", field="metadata")
        return text


# Version 4: the version nibble 4, the variant bits 10 (RFC 4122), as uuid.UUID sets them.
_V4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_V4_SET = (4 << 76) | (0x8000 << 48)


def _new_ids(n: int) -> list[uuid.UUID]:
    """``n`` random (version 4) UUIDs, as ``uuid.uuid4()`` makes them, from one urandom call.

    Each is the UUID ``uuid.UUID(bytes=..., version=4)`` would build (the same
    integer, version and variant bits set), filled in directly instead of through
    its argument checks: ~0.7 us an id against ~1.8 us, a tenth of the bulk
    path's Python time (tests/unit/test_new_ids.py holds the two side by side).
    """
    raw = os.urandom(16 * n)
    from_bytes, new, put = int.from_bytes, object.__new__, object.__setattr__
    unknown = uuid.SafeUUID.unknown
    ids = []
    for k in range(0, 16 * n, 16):
        value = new(uuid.UUID)
        put(value, "int", (from_bytes(raw[k : k + 16]) & _V4_CLEAR) | _V4_SET)
        put(value, "is_safe", unknown)
        ids.append(value)
    return ids


def _effective_due(job_id: uuid.UUID, due_at: datetime, window_seconds: int) -> datetime:
    return due_at + keys.spread_offset(job_id, window_seconds)


def _place(due_at: datetime, now: datetime) -> datetime:
    """The late-write rule: a past bucket is replaced by the open one."""
    return max(keys.bucket_of(due_at, conf.bucket_seconds()), open_bucket(now))


def _count_scheduled(jobs: Iterable[Job]) -> None:
    kinds = Counter(job.target_kind for job in jobs)
    for kind, n in kinds.items():
        JOBS_SCHEDULED.labels(kind).inc(n)


def _schedule_once(
    team: Team, specs: Sequence[JobSpec], now: datetime, texts: Sequence[str] | None
) -> list[tuple[Job, bool]]:
    width, opened = conf.bucket_seconds(), open_bucket(now)
    with transaction.atomic():
        replays, aliases = _resolve_idempotency(team, specs)
        fresh = [i for i in range(len(specs)) if i not in replays and i not in aliases]
        ids = _new_ids(len(fresh))
        dues = [
            _effective_due(job_id, specs[i].due_at, specs[i].window_seconds)
            if specs[i].window_seconds
            else specs[i].due_at
            for i, job_id in zip(fresh, ids, strict=True)
        ]
        # The late-write rule of _place, with the open bucket computed once.
        places = [max(keys.bucket_of(due, width), opened) for due in dues]
        counts = shard_counts_record(set(places))
        builder = JobBuilder(
            team=team, status=JobStatus.PENDING, created_at=now, updated_at=now, expires_at=None
        )
        created: dict[int, Job] = {}

        def build() -> Iterator[Job]:
            for i, job_id, due, place in zip(fresh, ids, dues, places, strict=True):
                spec = specs[i]
                job = created[i] = builder.build(
                    {
                        "id": job_id,
                        "due_at": due,
                        "bucket": place,
                        "shard": keys.shard_of(job_id, counts[place]),
                        "target_kind": spec.target_kind,
                        "target": spec.target,
                        "payload": spec.payload,
                        "metadata": spec.metadata,
                        "idempotency_key": spec.idempotency_key,
                        "request_fingerprint": spec.fingerprint() if spec.idempotency_key else "",
                        "window_seconds": spec.window_seconds,
                        "_payload_json": texts[i] if texts is not None else None,
                    }
                )
                if spec.expires_after_seconds is not None:
                    job.expires_at = spec.due_at + timedelta(seconds=spec.expires_after_seconds)
                yield job

        if not fresh:
            pass  # every spec replays a job: nothing to write
        elif any(specs[i].idempotency_key is not None for i in fresh):
            jobs = list(build())
            idempotency_record(team, jobs, now)  # a racing key fails before the rows go
            jobs_insert(jobs)
        else:
            # Streamed: each row is sent as it is built, so PostgreSQL files the first
            # rows of the batch while Python builds the rest (the two overlap on two cores).
            jobs_insert(build())
        transaction.on_commit(lambda: _count_scheduled(created.values()))
    results: list[tuple[Job, bool]] = []
    for i in range(len(specs)):
        if i in replays:
            results.append((replays[i], False))
        elif i in aliases:
            results.append((created[aliases[i]], False))
        else:
            results.append((created[i], True))
    return results


def _schedule(
    team: Team, specs: Sequence[JobSpec], now: datetime, texts: Sequence[str] | None = None
) -> list[tuple[Job, bool]]:
    try:
        return _schedule_once(team, specs, now, texts)
    except IntegrityError as error:
        if not is_key_violation(error):
            raise
        # A concurrent request committed the same key first: replay against it.
        return _schedule_once(team, specs, now, texts)


def job_schedule_many(
    *, team: Team, specs: Sequence[JobSpec], now: datetime | None = None
) -> list[tuple[Job, bool]]:
    """Schedule ``specs`` all-or-nothing; return ``(job, created)`` in input order.

    A spec whose idempotency key matches an existing job with the same body
    replays that job (``created`` is False); a different body raises
    IdempotencyConflict. Costs a handful of statements for the whole batch: two
    idempotency reads and one key INSERT (keyed specs only), at most three for
    bucket counts, and one COPY (PostgreSQL) or one INSERT per 1,000 rows.
    Validation errors name the spec: ``[17].due_at``.
    """
    now = now or db_now()
    with gc_paused():
        checker = _SpecChecker(now)
        texts = []
        for index, spec in enumerate(specs):
            try:
                texts.append(checker.check(spec))
            except SchedulingError as error:
                raise type(error)(error.message, field=f"[{index}].{error.field}") from error
        return _schedule(team, specs, now, texts)


def job_schedule(
    *,
    team: Team,
    due_at: datetime,
    target_kind: str,
    target: str,
    payload: Any = None,
    metadata: dict[str, str] | None = None,
    idempotency_key: str | None = None,
    window_seconds: int = 0,
    expires_after_seconds: int | None = None,
    now: datetime | None = None,
) -> tuple[Job, bool]:
    """Schedule one job; return ``(job, created)``, False for a replay. No payload: ``{}``."""
    spec = JobSpec(
        due_at=due_at,
        target_kind=target_kind,
        target=target,
        payload={} if payload is None else payload,
        metadata=metadata or {},
        idempotency_key=idempotency_key,
        window_seconds=window_seconds,
        expires_after_seconds=expires_after_seconds,
    )
    now = now or db_now()
    job_spec_validate(spec, now=now)
    return _schedule(team, [spec], now)[0]


def _pending_job_for_update(team: Team, job_id: uuid.UUID | str) -> Job:
    job = job_for_update(team=team, job_id=job_id)
    if job.status != JobStatus.PENDING:
        raise JobNotPending(
            f"job {job_id} is {job.status}; only pending jobs can be changed.", field="status"
        )
    return job


def job_cancel(*, team: Team, job_id: uuid.UUID | str, now: datetime | None = None) -> Job:
    """Cancel a pending job; it stays readable with status ``canceled``."""
    now = now or db_now()
    with transaction.atomic():
        job = _pending_job_for_update(team, job_id)
        job.status = JobStatus.CANCELED
        job.updated_at = now
        job_save_in_partition(job, old_bucket=job.bucket, fields=["status", "updated_at"])
    return job


def job_reschedule(
    *,
    team: Team,
    job_id: uuid.UUID | str,
    due_at: datetime,
    payload: Any = ...,
    now: datetime | None = None,
) -> Job:
    """Move a pending job to ``due_at``: new bucket and shard in one transaction.

    ``payload`` is replaced only when given. The job keeps its delivery window and
    its expiry delay: ``expires_at`` moves with the due time it was counted from.
    """
    now = now or db_now()
    _validate_due_at(due_at, now)
    if payload is not ...:
        _validate_payload(payload)
    with transaction.atomic():
        job = _pending_job_for_update(team, job_id)
        old_bucket = job.bucket
        fields = ["due_at", "bucket", "shard", "updated_at"]
        if job.expires_at is not None:
            # expires_at was counted from the requested time, before the window's
            # spread; the spread is a function of the id, so it can be taken back.
            requested = job.due_at - keys.spread_offset(job.id, job.window_seconds)
            job.expires_at = due_at + (job.expires_at - requested)
            fields.append("expires_at")
        job.due_at = _effective_due(job.id, due_at, job.window_seconds)
        job.bucket = _place(job.due_at, now)
        count = shard_counts_record([job.bucket])[job.bucket]
        job.shard = keys.shard_of(job.id, count)
        if payload is not ...:
            job.payload = payload
            fields.append("payload")
        job.updated_at = now
        job_save_in_partition(job, old_bucket=old_bucket, fields=fields)
    return job
