"""What happens to a delivered, failed or expired job: the write-back rows.

Retries move the row to its new due time's ``(bucket, shard)`` through the same
machinery as a new job (``shard_counts_record`` + ``keys.shard_of``), in bulk. How
many tries and how far apart: the job's retry policy (``ClaimedJob.request``), what it
leaves out the team's defaults (read once per group, only when a job of it failed),
then the service's settings.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from polling import conf
from polling.dispatch.base import ClaimedJob, Outcome, answered_in_order
from polling.writing.writeback import Result
from scheduling import keys
from scheduling.conf import bucket_seconds
from scheduling.models import Team
from scheduling.sharding.buckets import shard_counts_record
from scheduling.sharding.clock import open_bucket

_MAX_ERROR_CHARS = 2000


@dataclass(frozen=True, slots=True)
class Policy:
    """A job's retry policy in force: tries in all, the backoff's base and cap, and the
    least delay the job or its team asked for (0: none; the jitter may halve the base)."""

    max_attempts: int
    base_seconds: float
    cap_seconds: float
    floor_seconds: float = 0.0


def backoff_seconds(
    attempt: int,
    *,
    retry_after: float | None = None,
    rng: random.Random | None = None,
    policy: Policy | None = None,
) -> float:
    """Exponential backoff with jitter: ``base * 2**(attempt-1)``, capped, times 0.5-1.0,
    never under the policy's floor.

    A target's Retry-After is honoured as a lower bound (still capped).
    """
    if policy is None:
        base, cap, floor = conf.retry_base_seconds(), conf.retry_cap_seconds(), 0.0
    else:
        base, cap, floor = policy.base_seconds, policy.cap_seconds, policy.floor_seconds
    delay = min(cap, base * 2 ** max(0, attempt - 1))
    delay *= 0.5 + 0.5 * (rng or random).random()
    delay = max(delay, min(floor, cap))
    if retry_after is not None and retry_after > 0:
        delay = max(delay, min(cap, retry_after))
    return delay


_TEAM_RETRY_FIELDS = (
    "retry_max_attempts",
    "retry_min_backoff_seconds",
    "retry_max_backoff_seconds",
)


class Policies:
    """The retry policy of each failed job of a group: the job's, then its team's
    defaults (one query for the group's teams, made only when a job failed), then the
    service's."""

    def __init__(self, jobs: Sequence[ClaimedJob] = ()) -> None:
        self.service = Policy(
            conf.max_attempts(), conf.retry_base_seconds(), conf.retry_cap_seconds()
        )
        self._jobs = jobs  # whose teams are read at the first failure (one query)
        self._teams: dict[int, tuple[int | None, int | None, int | None]] | None = None
        self._plain: dict[int, Policy] = {}

    def of(self, job: ClaimedJob) -> Policy:
        own = (job.request or {}).get("retry")
        if own is None:
            policy = self._plain.get(job.team_id)
            if policy is None:
                policy = self._plain[job.team_id] = self._merged({}, job.team_id)
            return policy
        return self._merged(own, job.team_id)

    def read_teams(self, jobs: Iterable[ClaimedJob]) -> None:
        rows = Team.objects.filter(id__in={job.team_id for job in jobs}).values_list(
            "id", *_TEAM_RETRY_FIELDS
        )
        self._teams = {team_id: tuple(rest) for team_id, *rest in rows}  # type: ignore[misc]

    def _merged(self, own: dict, team_id: int) -> Policy:
        if self._teams is None:
            self.read_teams(self._jobs)
        team = self._teams.get(team_id, (None, None, None))
        attempts = own.get("max_attempts") or team[0] or self.service.max_attempts
        low = own.get("min_backoff_seconds") or team[1]
        high = own.get("max_backoff_seconds") or team[2]
        base = float(low) if low else self.service.base_seconds
        cap = float(high) if high else max(self.service.cap_seconds, base)
        return Policy(int(attempts), base, max(cap, 1.0), float(low or 0))


def _paired(
    jobs: Sequence[ClaimedJob], outcomes: Sequence[Outcome]
) -> Iterable[tuple[ClaimedJob, Outcome]]:
    """Each outcome with its job: a zip in the usual case (``answered_in_order``)."""
    if answered_in_order(jobs, outcomes):
        return zip(jobs, outcomes, strict=True)
    by_id = {job.id: job for job in jobs}
    return ((by_id[outcome.job_id], outcome) for outcome in outcomes)


def results_build(
    *,
    jobs: Sequence[ClaimedJob],
    outcomes: Sequence[Outcome],
    expired: Sequence[ClaimedJob],
    now: datetime,
) -> list[Result]:
    """Turn outcomes into write-back rows; record the shard counts retries land in.

    Call inside the transaction of the write-back (``shard_counts_record`` caches
    a count only once it is committed).
    """
    results = [
        Result(
            j.id,
            "expired",
            j.due_at,
            j.bucket,
            j.shard,
            "expired before delivery",
            epoch=j.epoch,
            attempt=j.attempt,
            started_at=now,
        )
        for j in expired
    ]
    retries: list[tuple[ClaimedJob, datetime, datetime, str, Outcome]] = []
    deferred: list[tuple[ClaimedJob, datetime, datetime, str, Outcome]] = []
    # The team defaults are read at the first failure: a delivered group reads nothing.
    policies = Policies(jobs)
    for job, outcome in _paired(jobs, outcomes):
        started = outcome.started_at or now
        ms = _milliseconds(outcome.duration_seconds)
        code = outcome.status_code
        if outcome.result == "delivered":
            results.append(
                Result(
                    job.id,
                    "delivered",
                    job.due_at,
                    job.bucket,
                    job.shard,
                    epoch=job.epoch,
                    attempt=job.attempt,
                    started_at=started,
                    duration_ms=ms,
                    status_code=code,
                )
            )
            continue
        error = outcome.error[:_MAX_ERROR_CHARS]
        if outcome.result == "deferred":  # handed back untried: not an attempt
            due = now + timedelta(seconds=max(outcome.retry_after_seconds or 0, 0.0))
            bucket = max(keys.bucket_of(due, bucket_seconds()), open_bucket(now))
            deferred.append((job, due, bucket, error, outcome))
            continue
        policy = policies.of(job)
        if outcome.result == "dead" or job.attempt >= policy.max_attempts:
            if outcome.result != "dead":
                error = f"gave up after {job.attempt} attempts: {error}"[:_MAX_ERROR_CHARS]
            results.append(
                Result(
                    job.id,
                    "dead",
                    job.due_at,
                    job.bucket,
                    job.shard,
                    error,
                    epoch=job.epoch,
                    attempt=job.attempt,
                    started_at=started,
                    duration_ms=ms,
                    status_code=code,
                )
            )
        else:
            delay = backoff_seconds(
                job.attempt, retry_after=outcome.retry_after_seconds, policy=policy
            )
            due = now + timedelta(seconds=delay)
            bucket = max(keys.bucket_of(due, bucket_seconds()), open_bucket(now))
            retries.append((job, due, bucket, error, outcome))
    if retries or deferred:
        counts = shard_counts_record({bucket for _, _, bucket, _, _ in retries + deferred})
        for moves, counted in ((retries, True), (deferred, False)):
            results.extend(
                Result(
                    job.id,
                    "pending",
                    due,
                    bucket,
                    keys.shard_of(job.id, counts[bucket]),
                    error,
                    from_bucket=job.bucket,
                    counted=counted,
                    epoch=job.epoch,
                    attempt=job.attempt,
                    started_at=outcome.started_at or now,
                    duration_ms=_milliseconds(outcome.duration_seconds),
                    status_code=outcome.status_code,
                )
                for job, due, bucket, error, outcome in moves
            )
    return results


def _milliseconds(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)
