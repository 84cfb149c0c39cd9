"""Header values sealed again under the first key of SENDLATER_ENCRYPTION_KEYS (after a
rotation), on jobs and schedules: ``manage.py reencrypt_headers``."""

from __future__ import annotations

from django.db import transaction

from scheduling.jobs.requests import stored_resealed
from scheduling.models import Job, Schedule

CHUNK_ROWS = 500


def headers_reseal(*, chunk_rows: int = CHUNK_ROWS) -> tuple[int, int]:
    """Re-seal every job's and schedule's header values; return (jobs, schedules) changed.

    Each row is rewritten in its own partition (by id and bucket), a chunk per
    transaction, changing only ``request``: the pollers' writes touch other columns,
    and a token sealed under the previous key still opens while both keys are set.
    Safe to run again (a row already under the first key is sealed anew, nothing lost).
    """
    jobs = _reseal(
        Job.objects.filter(request__isnull=False).only("id", "bucket", "request"),
        chunk_rows,
        keyed=("id", "bucket"),
    )
    schedules = _reseal(
        Schedule.objects.filter(request__isnull=False).only("id", "request"),
        chunk_rows,
        keyed=("id",),
    )
    return jobs, schedules


def _reseal(rows, chunk_rows: int, *, keyed: tuple[str, ...]) -> int:  # type: ignore[no-untyped-def]
    changed = 0
    batch = []
    for row in rows.iterator(chunk_size=chunk_rows):
        resealed = stored_resealed(row.request or {})
        if resealed is not None:
            batch.append(({name: getattr(row, name) for name in keyed}, resealed))
        if len(batch) >= chunk_rows:
            changed += _write(rows.model, batch)
            batch = []
    if batch:
        changed += _write(rows.model, batch)
    return changed


def _write(model, batch) -> int:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        return sum(model.objects.filter(**key).update(request=value) for key, value in batch)
