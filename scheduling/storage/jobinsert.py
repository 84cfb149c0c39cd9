"""Writing new job rows in bulk: binary COPY on PostgreSQL (``scheduling.storage.dbcopy``),
multi-row INSERT elsewhere."""

from __future__ import annotations

import functools
import itertools
import json
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models.base import ModelState

from scheduling.models import Job, Team
from scheduling.storage.dbcopy import copy_rows
from scheduling.storage.prepared import prepared_fetchone

INSERT_BATCH_ROWS = 1000
# Column and the type psycopg packs it as (see copy_rows): text stands in for
# varchar, and for jsonb too, whose binary form is a version byte (\x01) and the
# JSON text: the str "\x01{...}" packs to exactly that, through psycopg's C
# text dumper (its bytea dumper is Python).
COPY_COLUMNS = (
    ("id", "uuid"),
    ("team_id", "int8"),
    ("due_at", "timestamptz"),
    ("bucket", "timestamptz"),
    ("shard", "int4"),
    ("status", "text"),
    ("target_kind", "text"),
    ("target", "text"),
    ("payload", "text"),
    ("metadata", "text"),
    ("idempotency_key", "text"),
    ("request_fingerprint", "text"),
    ("window_seconds", "int4"),
    ("expires_at", "timestamptz"),
    ("attempts", "int4"),
    ("last_error", "text"),
    ("created_at", "timestamptz"),
    ("updated_at", "timestamptz"),
    ("schedule_id", "uuid"),
    ("scheduled_for", "timestamptz"),
    ("flow_control_key", "text"),
    ("request", "text"),
    ("trace_context", "text"),
)
COPY_SQL = (
    f"COPY scheduling_job ({', '.join(name for name, _ in COPY_COLUMNS)})"
    " FROM STDIN (FORMAT BINARY)"
)
COPY_TYPES = tuple(kind for _, kind in COPY_COLUMNS)
_JSONB_COLUMNS = ("payload", "metadata", "request")
# One row: a prepared INSERT is one round trip, a COPY two (start, then finish).
_PLACEHOLDERS = ", ".join(
    f"%s::{'jsonb' if name in _JSONB_COLUMNS else kind}" for name, kind in COPY_COLUMNS
)
_NAMES = ", ".join(name for name, _ in COPY_COLUMNS)
# Built from the constant column list above only.
INSERT_ONE_SQL = f"INSERT INTO scheduling_job ({_NAMES}) VALUES ({_PLACEHOLDERS})"  # noqa: S608
_JSONB_AT = tuple(i for i, (name, _) in enumerate(COPY_COLUMNS) if name in _JSONB_COLUMNS)
# One row whose write times are the database's clock at the INSERT (insert_one_guarded).
_CLOCK_COLUMNS = ("created_at", "updated_at")
_CLOCK_AT = tuple(i for i, (name, _) in enumerate(COPY_COLUMNS) if name in _CLOCK_COLUMNS)
# The bucket the caller chose must be the late-write rule's by the statement's clock
# (scheduling.jobs.services._place), and the due time within the horizon by it.
_GUARDED_INSERT_ONE_SQL = (
    "INSERT INTO scheduling_job ({names}) SELECT {values} "
    "WHERE %s::timestamptz = GREATEST(%s::timestamptz, date_bin("
    "make_interval(secs => %s), statement_timestamp(), timestamptz 'epoch')) "
    "AND %s::timestamptz <= statement_timestamp() + %s::interval AND ({guard}) "
    "RETURNING created_at"
)
_JSONB_VERSION = "\x01"
_EMPTY_JSONB = _JSONB_VERSION + "{}"


@functools.cache
def _defaults() -> dict[str, object]:
    """The model's field defaults (read once; the app registry is ready by then)."""
    return {f.attname: f.get_default() for f in Job._meta.concrete_fields if not f.primary_key}


class JobBuilder:
    """New Jobs of one batch, without ``Model.__init__``.

    ``Model.__init__`` costs ~40 us per job through its per-field descriptors, a
    third of the bulk path's Python time; ``build`` copies one dict of the
    defaults, the batch's ``common`` values and the team, and adds the job's own
    (~1 us). The result behaves as a loaded row (``_state.adding`` False, ``team``
    cached).
    """

    def __init__(self, *, team: Team, **common: object) -> None:
        self.team = team
        self.template = {**_defaults(), **common, "team_id": team.pk}

    def build(self, values: dict[str, object]) -> Job:
        job = Job.__new__(Job)
        state = ModelState()
        state.adding = False
        state.db = "default"
        state.fields_cache = {"team": self.team}
        fields = self.template.copy()
        fields.update(values)
        fields["_state"] = state
        job.__dict__ = fields
        return job


# Version 4: the version nibble 4, the variant bits 10 (RFC 4122), as uuid.UUID sets them.
_V4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_V4_SET = (4 << 76) | (0x8000 << 48)


def new_job_ids(n: int) -> list[uuid.UUID]:
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


# The variant nibble (RFC 4122: its two high bits 10) of each hex digit drawn.
_VARIANT_NIBBLE = {digit: format((int(digit, 16) & 0x3) | 0x8, "x") for digit in "0123456789abcdef"}


def new_job_id_texts(n: int) -> list[str]:
    """``n`` random (version 4) UUIDs in their canonical text, ``str(uuid.uuid4())``'s
    form, from one urandom call, never built as ``uuid.UUID`` objects: ~0.9 us an id
    against ~1.5 us for ``new_job_ids`` and ``str`` (a topic's children, which
    PostgreSQL builds from their text: ``polling.writing.fanout``)."""
    h = os.urandom(16 * n).hex()
    v = _VARIANT_NIBBLE
    return [
        f"{h[k : k + 8]}-{h[k + 8 : k + 12]}-4{h[k + 13 : k + 16]}-{v[h[k + 16]]}"
        f"{h[k + 17 : k + 20]}-{h[k + 20 : k + 32]}"
        for k in range(0, 32 * n, 32)
    ]


def _jsonb(value: Any) -> str:
    return _JSONB_VERSION + json.dumps(value, separators=(",", ":"))


def _rows(jobs: Iterable[Job]) -> Iterator[tuple[object, ...]]:
    # Metadata is mostly a few labels shared by a whole batch: encode each
    # distinct value once. Only str -> str maps are cached (1 == True as a key).
    metadata_cache: dict[tuple[tuple[str, str], ...], str] = {}
    for job in jobs:
        d = job.__dict__
        text = d.get("_payload_json")
        metadata = d["metadata"]
        key = tuple(metadata.items()) if type(metadata) is dict else ()
        if not key and type(metadata) is dict:  # most jobs: no labels
            encoded = _EMPTY_JSONB
        elif key and all(type(k) is str and type(v) is str for k, v in key):
            encoded = metadata_cache.get(key)
            if encoded is None:
                encoded = metadata_cache[key] = _jsonb(metadata)
        else:
            encoded = _jsonb(metadata)
        yield (
            d["id"],
            d["team_id"],
            d["due_at"],
            d["bucket"],
            d["shard"],
            d["status"],
            d["target_kind"],
            d["target"],
            _JSONB_VERSION + text if text else _jsonb(d["payload"]),
            encoded,
            d["idempotency_key"],
            d["request_fingerprint"],
            d["window_seconds"],
            d["expires_at"],
            d["attempts"],
            d["last_error"],
            d["created_at"],
            d["updated_at"],
            d["schedule_id"],
            d["scheduled_for"],
            d["flow_control_key"],
            _request_jsonb(d),
            d["trace_context"],
        )


def _request_jsonb(d: dict[str, Any]) -> str | None:
    """The row's ``request`` as binary jsonb text: ``_request_json`` when the caller
    encoded it already (a topic's children), else encoded here."""
    text = d.get("_request_json")
    if text:
        return _JSONB_VERSION + text
    request = d["request"]
    return None if request is None else _jsonb(request)


def jobs_insert(jobs: Iterable[Job]) -> None:
    """Insert ``jobs`` (new, fully populated) in the caller's transaction.

    PostgreSQL: one binary COPY for the whole batch (rows are routed to their
    partitions by the server); ``jobs`` may be a generator, each row is sent as
    it is produced. A single row: one prepared INSERT. SQLite: ``bulk_create`` in
    1,000-row INSERTs.
    """
    if connection.vendor != "postgresql":
        rows = list(jobs)
        if rows:
            Job.objects.bulk_create(rows, batch_size=INSERT_BATCH_ROWS)
        return
    rows = _rows(jobs)
    first, second = next(rows, None), next(rows, None)
    if first is None:
        return
    if second is None:
        _insert_one(first)
        return
    copy_rows(COPY_SQL, itertools.chain((first, second), rows), types=COPY_TYPES)


def _insert_one(row: tuple[object, ...]) -> None:
    prepared_fetchone(INSERT_ONE_SQL, _one_params(row))


def _one_params(row: tuple[object, ...]) -> list[object]:
    params = list(row)
    for i in _JSONB_AT:  # the JSON text, without binary jsonb's version byte
        if params[i] is not None:
            params[i] = str(params[i]).removeprefix(_JSONB_VERSION)
    return params


def insert_one_guarded(
    job: Job,
    *,
    bucket_due: datetime,
    width_seconds: int,
    horizon: timedelta,
    guard_sql: str,
    guard_params: Sequence[object],
) -> tuple[str, list[object]]:
    """The prepared INSERT of one new job (PostgreSQL) that takes its write times from
    the database's clock and writes nothing unless, by that clock, ``job.bucket`` is
    the late-write rule's bucket for a job whose due time's bucket is ``bucket_due``,
    ``job.due_at`` is within ``horizon``, and ``guard_sql`` holds. For a caller that
    chose the bucket with its own clock and sends the INSERT without first asking the
    database's (``scheduling.jobs.services.job_write_one``). Returns (sql, params); the
    statement returns ``created_at``, or no row when it wrote nothing."""
    params = _one_params(next(_rows((job,))))
    for i in reversed(_CLOCK_AT):
        del params[i]
    params += [job.bucket, bucket_due, width_seconds, job.due_at, horizon, *guard_params]
    return _guarded_insert_one_sql(guard_sql), params


@functools.cache
def _guarded_insert_one_sql(guard_sql: str) -> str:
    values = ", ".join(
        "statement_timestamp()"
        if name in _CLOCK_COLUMNS
        else f"%s::{'jsonb' if name in _JSONB_COLUMNS else kind}"
        for name, kind in COPY_COLUMNS
    )
    return _GUARDED_INSERT_ONE_SQL.format(names=_NAMES, values=values, guard=guard_sql)
