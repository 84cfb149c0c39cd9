"""What a client asks for (``JobSpec``) and whether it can be scheduled.

Every check raises a SchedulingError naming the field. ``SpecChecker`` checks a
whole batch with settings read once and each distinct target checked once; the
scheduling services (``scheduling.jobs.services``) call it before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduling import conf, handlers, keys
from scheduling.errors import InvalidDueTime, InvalidTarget, PayloadTooLarge, SchedulingError
from scheduling.flow.services import key_validate
from scheduling.jobs.requests import DeliveryRequest, RequestChecker, webhook_url_check
from scheduling.models import TOPIC_NAME_PATTERN, TargetKind

_HANDLER_NAME = re.compile(handlers.HANDLER_NAME_PATTERN)
_TOPIC_NAME = re.compile(TOPIC_NAME_PATTERN)
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
    # The team's flow-control key whose limits the job obeys (scheduling.flow).
    flow_control_key: str | None = None
    # What the job sends besides its payload and what is heard after (method, headers,
    # body format, timeout, retry policy, callbacks): None is today's webhook.
    request: DeliveryRequest | None = None
    # The W3C trace context to keep (``scheduling.tracing``): not part of the request's
    # fingerprint (a retried request comes in another span, and replays all the same).
    trace_context: str | None = None

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
        if self.flow_control_key is not None:
            # Only when given: the fingerprints of requests without a key (stored
            # before keys existed) stay what they were.
            body["flow_control_key"] = self.flow_control_key
        if self.request is not None and not self.request.is_default():
            body["request"] = self.request.fingerprint_part()  # only when given, as above
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()


def validate_due_at(due_at: datetime, now: datetime, latest: datetime | None = None) -> None:
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
        webhook_url_check(target, field="target")
    elif target_kind == TargetKind.HANDLER:
        if not _HANDLER_NAME.match(target or ""):
            raise InvalidTarget("handler name is not valid.", field="target")
        if not handlers.is_registered(target):
            raise InvalidTarget(
                f"unknown handler {target!r}; registered: {', '.join(handlers.names())}.",
                field="target",
            )
    elif target_kind == TargetKind.TOPIC:
        # Not looked up: a topic may be made after its jobs (one missing at the due
        # time ends the job dead, and its failure callback hears it).
        if not isinstance(target, str) or not _TOPIC_NAME.match(target):
            raise InvalidTarget("topic name is not valid.", field="target")
    else:
        raise InvalidTarget(
            "target kind must be 'webhook', 'handler' or 'topic'.", field="target_kind"
        )


def validate_payload(payload: Any, limit: int | None = None) -> str:
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
    SpecChecker(now).check(spec)


class SpecChecker:
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
        self.requests = RequestChecker()

    def check(self, spec: JobSpec) -> str:
        """Raise a SchedulingError naming the field; return the payload's compact JSON."""
        validate_due_at(spec.due_at, self.now, self.latest)
        kind, target = spec.target_kind, spec.target
        if not (isinstance(kind, str) and isinstance(target, str)) or (
            (kind, target) not in self.targets_ok
        ):
            _validate_target(kind, target)
            self.targets_ok.add((kind, target))
        text = validate_payload(spec.payload, self.payload_limit)
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
        if spec.flow_control_key is not None:
            key_validate(spec.flow_control_key, field="flow_control_key")
        if spec.request is not None:
            self.requests.check(spec.request, target_kind=kind, payload=spec.payload)
        return text
