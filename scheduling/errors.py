"""Domain errors raised by scheduling services; the API maps them to HTTP."""

from __future__ import annotations


class SchedulingError(Exception):
    """Base of every domain error. ``field`` names the input at fault, if any."""

    code = "invalid"
    status = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidDueTime(SchedulingError):
    code = "invalid_due_at"


class InvalidTarget(SchedulingError):
    code = "invalid_target"


class InvalidCutover(SchedulingError):
    code = "invalid_cutover"


class JobNotFound(SchedulingError):
    code = "not_found"
    status = 404


class JobNotPending(SchedulingError):
    code = "not_pending"
    status = 409


class IdempotencyConflict(SchedulingError):
    code = "idempotency_conflict"
    status = 409


class PayloadTooLarge(SchedulingError):
    code = "payload_too_large"
    status = 413


class TeamNotFound(SchedulingError):
    code = "not_found"
    status = 404


class ScheduleNotFound(SchedulingError):
    code = "not_found"
    status = 404


class FlowControlNotFound(SchedulingError):
    code = "not_found"
    status = 404


class InvalidFlowControl(SchedulingError):
    code = "invalid_flow_control"


class TopicNotFound(SchedulingError):
    code = "not_found"
    status = 404


class InvalidTopic(SchedulingError):
    code = "invalid_topic"
