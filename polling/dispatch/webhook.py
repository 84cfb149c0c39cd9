"""The webhook sink: signed HTTP POSTs to each job's callback URL.

One connection pool per poller (keep-alive), deliveries of a batch run
concurrently, each host capped and guarded by a circuit breaker; redirects are
never followed; a response body is read only up to a small limit and kept as a
short excerpt. Every connection goes through the SSRF-checked network backend.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

import httpcore
from django.conf import settings

from polling.dbtime import DB_TIME
from polling.dispatch.base import ClaimedJob, Outcome
from polling.dispatch.guarded_network import BlockedConnect, GuardedBackend
from polling.dispatch.hostguard import HostGuard, HostOpen
from polling.dispatch.signing import signed_headers
from polling.dispatch.team_secrets import SecretsLookup, team_signing_secrets
from polling.renewer import PROGRESS
from scheduling import conf
from scheduling.clock import iso_utc

logger = logging.getLogger(__name__)

USER_AGENT = "sendlater-webhook/1"
ERROR_EXCERPT_CHARS = 300
_MAX_BODY_READ_BYTES = 64 * 1024
_RETRY_AFTER_CAP_SECONDS = 24 * 3600


def retry_after_seconds(value: str | None, now: datetime) -> float | None:
    """Parse a Retry-After header (seconds or an HTTP date); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), _RETRY_AFTER_CAP_SECONDS)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max((when - now).total_seconds(), 0.0), _RETRY_AFTER_CAP_SECONDS)


def classify(status: int, headers: dict[str, str], now: datetime) -> tuple[str, float | None]:
    """Map an HTTP status to ``(result, retry_after_seconds)``."""
    if 200 <= status < 300:
        return "delivered", None
    if status == 410:
        return "dead", None
    if status in (429, 503):
        return "retry", retry_after_seconds(headers.get("retry-after"), now)
    return "retry", None


def request_body(job: ClaimedJob) -> str:
    body = {
        "id": str(job.id),
        "due_at": iso_utc(job.due_at),
        "payload": job.payload,
        "attempt": job.attempt,
        "metadata": job.metadata,
    }
    if job.schedule_id is not None:  # an occurrence of a recurring schedule
        body["schedule_id"] = str(job.schedule_id)
        body["scheduled_for"] = iso_utc(job.scheduled_for) if job.scheduled_for else None
    return json.dumps(body, separators=(",", ":"))


def _host_key(url: str) -> str:
    parts = urlsplit(url)
    return (
        f"{(parts.hostname or '').lower()}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
    )


def _interleave_by_host(jobs: Sequence[ClaimedJob]) -> list[ClaimedJob]:
    """Round-robin the batch across hosts so one host's jobs don't queue first."""
    by_host: dict[str, list[ClaimedJob]] = defaultdict(list)
    for job in jobs:
        by_host[_host_key(job.target)].append(job)
    queues = list(by_host.values())
    ordered: list[ClaimedJob] = []
    for round_ in range(max((len(q) for q in queues), default=0)):
        ordered.extend(q[round_] for q in queues if round_ < len(q))
    return ordered


class WebhookSink:
    """Deliver webhook jobs; returns one Outcome per job, never raises per job."""

    def __init__(
        self,
        *,
        concurrency: int = 16,
        secrets_for: SecretsLookup | None = None,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        guard: HostGuard | None = None,
        clock: Callable[[], datetime] = DB_TIME.now,
    ) -> None:
        self.concurrency = max(1, concurrency)
        self.secrets_for = secrets_for or team_signing_secrets
        self.connect_timeout = connect_timeout or settings.SENDLATER_WEBHOOK_CONNECT_TIMEOUT_SECONDS
        self.read_timeout = read_timeout or settings.SENDLATER_WEBHOOK_READ_TIMEOUT_SECONDS
        self.guard = guard or HostGuard(
            max_per_host=settings.SENDLATER_WEBHOOK_MAX_PER_HOST,
            failure_threshold=settings.SENDLATER_BREAKER_FAILURES,
            cooldown=settings.SENDLATER_BREAKER_COOLDOWN_SECONDS,
            max_cooldown=settings.SENDLATER_BREAKER_MAX_COOLDOWN_SECONDS,
        )
        self.clock = clock
        self.pool = httpcore.ConnectionPool(
            max_connections=self.concurrency * 2,
            max_keepalive_connections=self.concurrency * 2,
            keepalive_expiry=30.0,
            retries=0,
            network_backend=GuardedBackend(conf.callback_allowlist()),
        )
        self.executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="webhook")

    def deliver(self, jobs: Sequence[ClaimedJob]) -> list[Outcome]:
        if not jobs:
            return []
        secrets = self.secrets_for({job.team_id for job in jobs})
        ordered = _interleave_by_host(jobs)
        futures = {
            job.id: self.executor.submit(self._deliver_one, job, secrets.get(job.team_id, []))
            for job in ordered
        }
        return [futures[job.id].result() for job in jobs]

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        self.pool.close()

    def _deliver_one(self, job: ClaimedJob, secrets: Iterable[str]) -> Outcome:
        # The database's clock, not this machine's: receivers check webhook-timestamp
        # against theirs (Standard Webhooks: within 5 minutes). Durations: monotonic.
        started = self.clock()
        t0 = time.monotonic()
        host = _host_key(job.target)

        def outcome(result: str, error: str = "", **extra: object) -> Outcome:
            PROGRESS.touch()  # a delivery finished: the batch is moving (lease renewer)
            return Outcome(
                job_id=job.id,
                result=result,  # type: ignore[arg-type]
                error=error[:ERROR_EXCERPT_CHARS],
                started_at=started,
                duration_seconds=time.monotonic() - t0,
                **extra,  # type: ignore[arg-type]
            )

        secrets = list(secrets)
        if not secrets:
            return outcome("retry", "team has no signing secret")
        try:
            with self.guard.slot(host) as trial:
                ok = False
                try:
                    result = self._post(job, secrets, started)
                    # A 4xx other than 429 is the job's fault: the host itself is fine.
                    code = result.status_code or 0
                    ok = code < 500 and code != 429
                    return outcome(
                        result.result,
                        result.error,
                        status_code=result.status_code,
                        retry_after_seconds=result.retry_after_seconds,
                    )
                except BlockedConnect as error:
                    ok = True  # the host answered nothing; the guard, not the host, refused
                    return outcome("dead", str(error))
                except httpcore.TimeoutException as error:
                    return outcome("retry", f"timeout: {type(error).__name__}")
                except (httpcore.NetworkError, httpcore.ProtocolError, OSError) as error:
                    return outcome("retry", f"{type(error).__name__}: {error}")
                finally:
                    self.guard.record(host, ok=ok, trial=trial)
        except HostOpen as error:
            return outcome("retry", str(error), retry_after_seconds=error.retry_after)

    def _post(self, job: ClaimedJob, secrets: list[str], started: datetime) -> Outcome:
        body = request_body(job)
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            **signed_headers(secrets=secrets, msg_id=str(job.id), timestamp=started, body=body),
        }
        timeout = {
            "connect": self.connect_timeout,
            "read": self.read_timeout,
            "write": self.read_timeout,
            "pool": self.read_timeout,
        }
        with self.pool.stream(
            "POST",
            job.target,
            headers=list(headers.items()),
            content=body.encode(),
            extensions={"timeout": timeout},
        ) as response:
            excerpt = b""
            for chunk in response.iter_stream():
                if len(excerpt) < _MAX_BODY_READ_BYTES:
                    excerpt += chunk
                else:
                    break  # don't read a huge body; the connection is dropped
            status = response.status
            response_headers = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers
            }
        result, retry_after = classify(status, response_headers, self.clock())
        error = ""
        if result != "delivered":
            text = excerpt[:ERROR_EXCERPT_CHARS].decode("utf-8", "replace")
            error = f"HTTP {status}: {text}".strip()
        return Outcome(
            job_id=job.id,
            result=result,  # type: ignore[arg-type]
            error=error,
            status_code=status,
            retry_after_seconds=retry_after,
        )
