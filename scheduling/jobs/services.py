"""Writes: schedule, cancel and reschedule jobs.

Elsewhere: the request (``JobSpec``) and its checks in ``scheduling.jobs.specs``, cutovers
in ``scheduling.sharding.cutovers``, bulk cancel in ``scheduling.jobs.cancels``, dead-letter requeue
in ``scheduling.jobs.deadletters``.

Every service is keyword-only and transactional. Where a job lands:
``bucket = max(bucket_of(due_at), open_bucket(now))`` and
``shard = shard_of(id, S_bucket)`` with the bucket's recorded count.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction

from scheduling import conf, keys, tracing
from scheduling.errors import JobNotPending, SchedulingError
from scheduling.jobs.idempotency import idempotency_record, is_key_violation
from scheduling.jobs.idempotency import idempotency_resolve as _resolve_idempotency
from scheduling.jobs.inflight import job_in_flight_refuse
from scheduling.jobs.requests import DeliveryRequest, RequestSealer

# Re-exported: what a client asks for, and its checks, live in scheduling.jobs.specs.
from scheduling.jobs.specs import JobSpec as JobSpec
from scheduling.jobs.specs import SpecChecker, validate_due_at, validate_payload
from scheduling.jobs.specs import job_spec_validate as job_spec_validate
from scheduling.metrics import JOBS_SCHEDULED
from scheduling.models import Job, JobStatus, Team
from scheduling.sharding.buckets import shard_count_cached, shard_counts_record
from scheduling.sharding.clock import db_now, open_bucket

# Re-exported: callers have always imported the cutover services from here.
from scheduling.sharding.cutovers import cutover_earliest as cutover_earliest
from scheduling.sharding.cutovers import cutover_schedule as cutover_schedule
from scheduling.storage.gcpause import gc_paused
from scheduling.storage.jobinsert import JobBuilder, insert_one_guarded, jobs_insert, new_job_ids
from scheduling.storage.jobrows import job_for_update, job_save_in_partition


def _effective_due(job_id: uuid.UUID, due_at: datetime, window_seconds: int) -> datetime:
    if not window_seconds:  # most jobs: no window, nothing to spread (no new datetime)
        return due_at
    return due_at + keys.spread_offset(job_id, window_seconds)


def _place(due_at: datetime, now: datetime) -> datetime:
    """The late-write rule: a past bucket is replaced by the open one."""
    return max(keys.bucket_of(due_at, conf.bucket_seconds()), open_bucket(now))


def _count_scheduled(jobs: Iterable[Job]) -> None:
    kinds = Counter(job.target_kind for job in jobs)
    for kind, n in kinds.items():
        child = _scheduled_by_kind.get(kind)
        if child is None:  # (labels() takes a lock and checks its values each call)
            child = _scheduled_by_kind[kind] = JOBS_SCHEDULED.labels(kind)
        child.inc(n)


_scheduled_by_kind: dict[str, Any] = {}


def _job_new(
    builder: JobBuilder,
    spec: JobSpec,
    job_id: uuid.UUID,
    due: datetime,
    place: datetime,
    counts: dict[datetime, int],
    text: str | None,
    trace_context: str | None = None,
    sealer: RequestSealer | None = None,
) -> Job:
    """The new Job for ``spec``: its id, effective due time, bucket (``place``), shard
    by the bucket's count, the payload's JSON ``text`` when checked already, and the
    spec's trace context, else ``trace_context`` (``_trace_context_default``).
    ``sealer`` seals the batch's header sets (each distinct one once)."""
    job = builder.build(
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
            "flow_control_key": spec.flow_control_key,
            "request": None
            if spec.request is None
            else (sealer or RequestSealer()).stored(spec.request),
            "trace_context": spec.trace_context or trace_context,
            "_payload_json": text,
        }
    )
    if spec.expires_after_seconds is not None:
        job.expires_at = spec.due_at + timedelta(seconds=spec.expires_after_seconds)
    return job


def _trace_context_default(specs: Sequence[JobSpec]) -> str | None:
    """The context the jobs of ``specs`` that bring none keep: with tracing on, the
    current span's (the API request's), else a new trace's; with tracing off, none."""
    if tracing.TRACER is None or all(spec.trace_context for spec in specs):
        return None
    return tracing.context_new("sendlater.jobs.schedule", **{"sendlater.jobs": len(specs)})


def _atomic_unless_one_statement(specs: Sequence[JobSpec]) -> AbstractContextManager[object]:
    """The batch's transaction; none where the write is one statement anyway.

    One job without an idempotency key on PostgreSQL writes one INSERT (the bucket's
    shard count, if new, is recorded first by one idempotent statement that may
    commit alone): a transaction would only add BEGIN and COMMIT round trips.
    """
    if len(specs) == 1 and specs[0].idempotency_key is None and connection.vendor == "postgresql":
        return nullcontext()
    return transaction.atomic()


def _schedule_once(
    team: Team,
    specs: Sequence[JobSpec],
    now: datetime,
    texts: Sequence[str] | None,
    trace_context: str | None,
) -> list[tuple[Job, bool]]:
    width, opened = conf.bucket_seconds(), open_bucket(now)
    with _atomic_unless_one_statement(specs):
        replays, aliases = _resolve_idempotency(team, specs)
        fresh = [i for i in range(len(specs)) if i not in replays and i not in aliases]
        ids = new_job_ids(len(fresh))
        dues = [
            _effective_due(job_id, specs[i].due_at, specs[i].window_seconds)
            for i, job_id in zip(fresh, ids, strict=True)
        ]
        # The late-write rule of _place, with the open bucket computed once.
        places = [max(keys.bucket_of(due, width), opened) for due in dues]
        counts = shard_counts_record(set(places))
        builder = JobBuilder(
            team=team, status=JobStatus.PENDING, created_at=now, updated_at=now, expires_at=None
        )
        created: dict[int, Job] = {}
        sealer = RequestSealer()

        def build() -> Iterator[Job]:
            for i, job_id, due, place in zip(fresh, ids, dues, places, strict=True):
                text = texts[i] if texts is not None else None
                job = created[i] = _job_new(
                    builder, specs[i], job_id, due, place, counts, text, trace_context, sealer
                )
                yield job

        if any(specs[i].idempotency_key is not None for i in fresh):
            jobs = list(build())
            idempotency_record(team, jobs, now)  # a racing key fails before the rows go
            jobs_insert(jobs)
        elif fresh:  # (all replays: nothing to write)
            # Streamed: each row is sent as it is built, so PostgreSQL files the first
            # rows of the batch while Python builds the rest (the two overlap on two cores).
            jobs_insert(build())
        if connection.in_atomic_block:
            transaction.on_commit(lambda: _count_scheduled(created.values()))
        else:  # one statement, committed already
            _count_scheduled(created.values())
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
    trace_context = _trace_context_default(specs)
    try:
        return _schedule_once(team, specs, now, texts, trace_context)
    except IntegrityError as error:
        if not is_key_violation(error):
            raise
        # A concurrent request committed the same key first: replay against it.
        return _schedule_once(team, specs, now, texts, trace_context)


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
        checker = SpecChecker(now)
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
    flow_control_key: str | None = None,
    request: DeliveryRequest | None = None,
    trace_context: str | None = None,
    now: datetime | None = None,
) -> tuple[Job, bool]:
    """Schedule one job; return ``(job, created)``, False for a replay. No payload: ``{}``.

    ``request``: what it sends besides the payload (method, headers, ...; None: the default).
    ``trace_context``: the W3C context to keep (``scheduling.tracing.context_parse``);
    None: the current span's with tracing on, else none."""
    spec = JobSpec(
        due_at=due_at,
        target_kind=target_kind,
        target=target,
        payload={} if payload is None else payload,
        metadata=metadata or {},
        idempotency_key=idempotency_key,
        window_seconds=window_seconds,
        expires_after_seconds=expires_after_seconds,
        flow_control_key=flow_control_key,
        request=request,
        trace_context=trace_context,
    )
    now = now or db_now()
    text = SpecChecker(now).check(spec)  # job_spec_validate, keeping the payload's JSON
    return _schedule(team, [spec], now, [text])[0]


@dataclass(frozen=True)
class JobWrite:
    """One new job and the guarded INSERT that writes it (``job_write_one``)."""

    job: Job
    sql: str
    params: list[object]


def job_write_one(
    *,
    team: Team,
    spec: JobSpec,
    now: datetime,
    guard_sql: str = "TRUE",
    guard_params: Sequence[object] = (),
) -> JobWrite | None:
    """``job_schedule`` of one job without an idempotency key, as one INSERT to send
    without asking the database's clock first (PostgreSQL): the caller sends it in
    the same round trip as a statement before it (scheduling/api/jobs/fastpath.py).

    ``now`` is this process's clock. The bucket is chosen and the spec checked with
    it; the INSERT takes its write times from the database's clock and writes only if
    by that clock the bucket is the late-write rule's and the due time within the
    horizon, and ``guard_sql`` holds; else it writes nothing (``job_schedule`` then
    decides by the database's clock). None where it cannot be sent: the spec does not
    pass with ``now`` (``job_schedule`` answers it by the database's clock), or the
    bucket's shard count is not known to this process yet (its first write records
    it). Once written, ``job_written`` completes the Job.
    """
    if spec.idempotency_key is not None:
        return None
    try:
        text = SpecChecker(now).check(spec)
    except SchedulingError:
        return None
    width = conf.bucket_seconds()
    (job_id,) = new_job_ids(1)
    due = _effective_due(job_id, spec.due_at, spec.window_seconds)
    bucket_due = keys.bucket_of(due, width)
    place = max(bucket_due, open_bucket(now))
    count = shard_count_cached(place)
    if count is None:
        return None
    builder = JobBuilder(
        team=team, status=JobStatus.PENDING, created_at=now, updated_at=now, expires_at=None
    )
    job = _job_new(
        builder, spec, job_id, due, place, {place: count}, text, _trace_context_default((spec,))
    )
    sql, params = insert_one_guarded(
        job,
        bucket_due=bucket_due,
        width_seconds=width,
        horizon=conf.max_horizon(),
        guard_sql=guard_sql,
        guard_params=guard_params,
    )
    return JobWrite(job, sql, params)


def job_written(write: JobWrite, created_at: datetime) -> Job:
    """The Job of a ``job_write_one`` INSERT that wrote it at ``created_at``."""
    job = write.job
    job.created_at = job.updated_at = created_at.astimezone(UTC)
    _count_scheduled((job,))
    return job


def _pending_job_for_update(team: Team, job_id: uuid.UUID | str) -> Job:
    """Lock the team's job and check it is pending and not in flight (in that order:
    the lock order of ``scheduling.jobs.inflight``)."""
    job = job_for_update(team=team, job_id=job_id)
    if job.status != JobStatus.PENDING:
        raise JobNotPending(
            f"job {job_id} is {job.status}; only pending jobs can be changed.", field="status"
        )
    job_in_flight_refuse(job)
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
    validate_due_at(due_at, now)
    if payload is not ...:
        validate_payload(payload)
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
