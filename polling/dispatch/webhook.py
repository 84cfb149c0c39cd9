"""The webhook sink: signed HTTP POSTs to each job's callback URL.

``submit`` builds each job's body on the caller's thread (the poller's) and hands
it to the transport process (``polling.dispatch.transport``: signing, libcurl,
keep-alive, each host capped and guarded by a circuit breaker, SSRF-checked at
connect, no redirects, bounded reads); each reply becomes an ``Outcome``
reported through ``done`` as soon as it arrives.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import orjson
from django.conf import settings

from polling.common.database_time import DB_TIME
from polling.dispatch.base import ClaimedJob, Done, Outcome, deliver_all
from polling.dispatch.hostguard import HostGuard
from polling.dispatch.signing import unix_seconds
from polling.dispatch.spans import delivery_headers, delivery_span
from polling.dispatch.team_secrets import SecretsLookup, team_signing_secrets
from polling.dispatch.transport import Outgoing, Reply, TransportProcess
from polling.ownership.renewer import PROGRESS
from scheduling import conf, tracing
from scheduling.jobs.requests import (
    BODYLESS_METHODS,
    PAYLOAD_JSON_CONTENT_TYPE,
    PAYLOAD_TEXT_CONTENT_TYPE,
    headers_unsealed,
)
from scheduling.sealing import InvalidToken
from scheduling.sharding.clock import iso_utc

logger = logging.getLogger(__name__)

USER_AGENT = "sendlater-webhook/1"
ERROR_EXCERPT_CHARS = 300
RESPONSE_EXCERPT_CHARS = 1024  # a kept response (capture_response, callbacks)
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


def request_body(job: ClaimedJob) -> bytes:
    """The JSON body of a delivery (compact; what the signature covers)."""
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
    if job.flow_key is not None:  # a job under flow control (docs/delivery.md)
        body["flow_control_key"] = job.flow_key
    try:
        return orjson.dumps(body)
    except TypeError:  # an integer beyond 64 bits, which orjson refuses: exact all the same
        return json.dumps(body, separators=(",", ":")).encode()


_HEADERS = [
    "content-type: application/json",
    f"user-agent: {USER_AGENT}",
    "expect:",  # no 100-continue round trip
]
# The stored request's keys that change what is sent (``shaped_request``, the method
# and timeout): a request with none of them (callbacks or capture only, a topic's
# child) sends the default webhook.
_SHAPING = frozenset({"format", "content_type", "method", "headers_sealed", "timeout_seconds"})


def shaped_request(job: ClaimedJob, request: dict) -> tuple[bytes, list[str]]:
    """The body and headers of a job with a delivery contract (``job.request``): its
    body format, its method (GET and DELETE send no body), its own headers (unsealed
    here, in the poller's memory only; never logged). InvalidToken if no key of
    SENDLATER_ENCRYPTION_KEYS opens them."""
    content_type: str | None = "application/json"
    if request.get("format") == "payload":
        payload = job.payload
        if isinstance(payload, str):
            body = payload.encode()
            content_type = request.get("content_type") or PAYLOAD_TEXT_CONTENT_TYPE
        else:
            try:
                body = orjson.dumps(payload)
            except TypeError:  # an integer beyond 64 bits, as in request_body
                body = json.dumps(payload, separators=(",", ":")).encode()
            content_type = request.get("content_type") or PAYLOAD_JSON_CONTENT_TYPE
    else:
        body = request_body(job)
    if request.get("method", "POST") in BODYLESS_METHODS:
        body, content_type = b"", None
    own = headers_unsealed(request)
    headers = [f"content-type: {content_type}"] if content_type else []
    if not any(name.lower() == "user-agent" for name in own):
        headers.append(f"user-agent: {USER_AGENT}")
    headers += [f"{name}: {value}" for name, value in own.items()]
    headers.append("expect:")
    return body, headers


def _traced(headers: list[str]) -> bool:
    """Whether ``headers`` (``name: value`` lines) already carry a ``traceparent``."""
    return any(line[:12].lower() == "traceparent:" for line in headers)


class WebhookSink:
    """Deliver webhook jobs; reports one Outcome per job, never raises per job."""

    def __init__(
        self,
        *,
        concurrency: int | None = None,
        max_connections: int | None = None,
        secrets_for: SecretsLookup | None = None,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        guard: HostGuard | None = None,
        clock: Callable[[], datetime] = DB_TIME.now,
    ) -> None:
        """``max_connections``: requests in flight at once over all hosts (the
        connection pool; default SENDLATER_WEBHOOK_MAX_CONNECTIONS). ``concurrency``
        (the handler threads every sink is built with) does not apply: webhooks run
        in one transport process, bounded by the window and the per-host cap.
        ``guard`` gives the per-host cap and breaker settings (the transport process
        keeps the state)."""
        del concurrency
        self.secrets_for = secrets_for or team_signing_secrets
        self.clock = clock
        guard = guard or HostGuard(
            max_per_host=settings.SENDLATER_WEBHOOK_MAX_PER_HOST,
            failure_threshold=settings.SENDLATER_BREAKER_FAILURES,
            cooldown=settings.SENDLATER_BREAKER_COOLDOWN_SECONDS,
            max_cooldown=settings.SENDLATER_BREAKER_MAX_COOLDOWN_SECONDS,
        )
        config = {
            "allowlist": conf.callback_allowlist(),
            "guard": guard.settings(),
            "connect_timeout": connect_timeout
            or settings.SENDLATER_WEBHOOK_CONNECT_TIMEOUT_SECONDS,
            "read_timeout": read_timeout or settings.SENDLATER_WEBHOOK_READ_TIMEOUT_SECONDS,
            "max_connections": max_connections or settings.SENDLATER_WEBHOOK_MAX_CONNECTIONS,
        }
        self.transport = TransportProcess(config=config, on_replies=self._on_replies)
        self._tokens = itertools.count()
        self._lock = threading.Lock()
        # token -> (job, done, when signed: database time, monotonic time, the span id
        # its traceparent announced: 0 for none)
        self._pending: dict[int, tuple[ClaimedJob, Done, datetime, float, int]] = {}

    def submit(self, jobs: Sequence[ClaimedJob], done: Done) -> None:
        if not jobs:
            return
        secrets = self.secrets_for({job.team_id for job in jobs})
        signed_at = self.clock()  # the database's clock (receivers check it, +-5 min)
        signed_mono = time.monotonic()
        seconds = unix_seconds(signed_at)  # webhook-timestamp
        traced = tracing.TRACER is not None  # off: nothing of tracing per job
        batch: list[Outgoing] = []
        pending = []
        for job in jobs:
            keys = secrets.get(job.team_id)
            if not keys:
                done(job, Outcome(job.id, "retry", error="team has no signing secret"))
                continue
            token = next(self._tokens)
            request = job.request
            method, timeout = "POST", 0.0
            if request is None or _SHAPING.isdisjoint(request):  # the default webhook
                body, headers = request_body(job), _HEADERS
            else:
                try:
                    body, headers = shaped_request(job, request)
                except InvalidToken:
                    error = "header values cannot be decrypted (SENDLATER_ENCRYPTION_KEYS)"
                    done(job, Outcome(job.id, "retry", error=error))
                    continue
                method = request.get("method", "POST")
                timeout = float(request.get("timeout_seconds") or 0)
            span_id = 0
            # this attempt's own span in the job's trace (a traceparent the job's own
            # headers set is theirs: sent as it is, and no span of ours)
            if traced and job.trace_context and (request is None or not _traced(headers)):
                headers, span_id = delivery_headers(job, headers)
            outgoing = Outgoing(  # positional: a keyword costs per job
                token, job.target, str(job.id), body, headers, keys, seconds, method, timeout
            )
            pending.append((token, (job, done, signed_at, signed_mono, span_id)))
            batch.append(outgoing)
        if not batch:
            return
        with self._lock:
            self._pending.update(pending)
        self.transport.send(batch)

    def host_caps(self, caps: dict[str, int]) -> None:
        """Cap each host in ``caps`` (``host_key``) at that many requests at once: this
        poller's share of the host's budget (``polling.flow.host_lanes``)."""
        self.transport.caps(caps)

    def warm(self) -> None:
        """Start the transport process ahead of the first job."""
        self.transport.warm()

    def deliver(self, jobs: Sequence[ClaimedJob]) -> list[Outcome]:
        """Deliver ``jobs`` and wait for all of them (tests and one-off callers)."""
        return deliver_all(self, jobs)

    def close(self) -> None:
        self.transport.close()

    def _on_replies(self, replies: list[tuple[int, Reply]]) -> None:
        """The transport's replies (on its reader thread): each becomes an Outcome."""
        with self._lock:
            entries = [(self._pending.pop(token, None), reply) for token, reply in replies]
        PROGRESS.touch()  # deliveries finished: the work is moving (lease renewer)
        for entry, reply in entries:
            if entry is None:
                continue
            job, done, signed_at, signed_mono, span_id = entry
            outcome = self._outcome(job, reply)
            outcome.started_at = signed_at + timedelta(
                seconds=max(0.0, reply.started - signed_mono)
            )
            outcome.duration_seconds = max(0.0, reply.finished - reply.started)
            if span_id:
                delivery_span(job, outcome, span_id)
            done(job, outcome)

    def _outcome(self, job: ClaimedJob, reply: Reply) -> Outcome:
        if reply.status is None:
            if reply.kind == "blocked":  # the guard refused; retrying cannot help
                return Outcome(job.id, "dead", error=reply.error[:ERROR_EXCERPT_CHARS])
            if reply.kind == "host_held":  # refused on a healthy path: not an attempt
                return Outcome(
                    job.id,
                    "deferred",
                    error=reply.error[:ERROR_EXCERPT_CHARS],
                    retry_after_seconds=reply.wait_hint,
                    breaker_open=True,
                )
            return Outcome(
                job.id,
                "retry",
                error=reply.error[:ERROR_EXCERPT_CHARS],
                retry_after_seconds=reply.wait_hint,
            )
        headers = {"retry-after": reply.retry_after} if reply.retry_after else {}
        result, retry_after = classify(reply.status, headers, self.clock())
        error = ""
        if result != "delivered":
            text = reply.excerpt[:ERROR_EXCERPT_CHARS].decode("utf-8", "replace")
            error = f"HTTP {reply.status}: {text}".strip()[:ERROR_EXCERPT_CHARS]
        outcome = Outcome(
            job.id,
            result,  # type: ignore[arg-type]
            error=error,
            status_code=reply.status,
            retry_after_seconds=retry_after,
        )
        if result != "delivered" or (job.request is not None and wants_response(job.request)):
            outcome.content_type = reply.content_type
            outcome.excerpt = reply.excerpt[:RESPONSE_EXCERPT_CHARS].decode("utf-8", "replace")
        return outcome


def wants_response(request: dict) -> bool:
    """Whether a delivered job keeps its response: it asked, or a success callback reports it."""
    return bool(request.get("capture_response") or request.get("on_success_url"))
