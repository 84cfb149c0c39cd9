"""Idempotency keys: which specs of a batch replay an existing job, and recording new keys.

Keys live in ``IdempotencyKey`` (unique per team), not on the jobs table, which
is partitioned by bucket on PostgreSQL. A key is written in the same transaction
as its job, before it: two racing requests collide on the key's unique
constraint (``KEY_CONSTRAINT``), and the loser replays against the winner.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import IntegrityError

from scheduling.errors import IdempotencyConflict
from scheduling.models import IdempotencyKey, Job, Team

if TYPE_CHECKING:
    from scheduling.jobs.specs import JobSpec

KEY_CONSTRAINT = "idempotencykey_team_key_uniq"


def is_key_violation(error: IntegrityError) -> bool:
    """True if ``error`` is the unique violation of a team's idempotency key."""
    diag = getattr(error.__cause__, "diag", None)
    if diag is not None and getattr(diag, "constraint_name", None):
        return diag.constraint_name == KEY_CONSTRAINT
    text = str(error)
    return KEY_CONSTRAINT in text or "scheduling_idempotencykey" in text


def idempotency_resolve(
    team: Team, specs: Sequence[JobSpec]
) -> tuple[dict[int, Job], dict[int, int]]:
    """Match keyed specs to existing jobs and to earlier specs in the same batch.

    Returns ``(replays, aliases)``: spec index -> the existing job it replays, and
    spec index -> the earlier spec index carrying the same key and body. Two
    reads whatever the batch size. A key whose job is gone (retention dropped it)
    is deleted here and the spec scheduled anew.
    """
    keyed = {i: s for i, s in enumerate(specs) if s.idempotency_key is not None}
    if not keyed:
        return {}, {}
    rows = list(
        IdempotencyKey.objects.filter(
            team=team, key__in={s.idempotency_key for s in keyed.values()}
        ).values_list("id", "key", "job_id", "fingerprint")
    )
    jobs = Job.objects.in_bulk([job_id for _, _, job_id, _ in rows]) if rows else {}
    stale = [pk for pk, _, job_id, _ in rows if job_id not in jobs]
    if stale:
        IdempotencyKey.objects.filter(id__in=stale).delete()
    existing = {key: (jobs[job_id], fp) for _, key, job_id, fp in rows if job_id in jobs}
    replays: dict[int, Job] = {}
    aliases: dict[int, int] = {}
    first_index: dict[str, int] = {}
    for i, spec in keyed.items():
        key = spec.idempotency_key
        assert key is not None
        fingerprint = spec.fingerprint()
        found = existing.get(key)
        earlier = first_index.get(key)
        if found is not None:
            if found[1] != fingerprint:
                raise IdempotencyConflict(
                    f"idempotency_key {key!r} was used with a different request body.",
                    field="idempotency_key",
                )
            replays[i] = found[0]
        elif earlier is not None:
            if specs[earlier].fingerprint() != fingerprint:
                raise IdempotencyConflict(
                    f"idempotency_key {key!r} appears twice with different bodies.",
                    field="idempotency_key",
                )
            aliases[i] = earlier
        else:
            first_index[key] = i
    return replays, aliases


def idempotency_record(team: Team, jobs: Sequence[Job], now: datetime) -> None:
    """Insert the keys of newly created keyed ``jobs``: one multi-row INSERT.

    Run before the jobs' INSERT in the same transaction; a racing request that
    committed the same key first makes this raise IntegrityError (see
    ``is_key_violation``), and nothing of the batch is written.
    """
    keys = [
        IdempotencyKey(
            team=team,
            key=job.idempotency_key,
            job_id=job.id,
            fingerprint=job.request_fingerprint,
            created_at=now,
        )
        for job in jobs
        if job.idempotency_key is not None
    ]
    if keys:
        IdempotencyKey.objects.bulk_create(keys, batch_size=1000)
