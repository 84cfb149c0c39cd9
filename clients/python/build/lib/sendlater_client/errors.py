"""Typed errors: one class per answer a caller may want to handle."""

from __future__ import annotations

from typing import Any


class SendlaterError(Exception):
    """Any error answer of the API (``status`` 0 for a network failure)."""

    def __init__(self, message: str, *, status: int = 0, code: str = "", body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.body = body


class AuthenticationError(SendlaterError):
    """401: no key, or an unknown or revoked one."""


class NotFound(SendlaterError):
    """404: no such job for this team."""


class Conflict(SendlaterError):
    """409: the job is not pending, or an idempotency key was reused with another body."""


class ValidationError(SendlaterError):
    """400/413/415: ``fields`` maps each bad input to its messages."""

    def __init__(self, message: str, *, fields: dict[str, list[str]] | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.fields = fields or {}


class RateLimited(SendlaterError):
    """429 after the retries ran out; ``retry_after`` in seconds."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.retry_after = retry_after


class ServiceUnavailable(SendlaterError):
    """503 (or another 5xx) after the retries ran out."""


class TransportError(SendlaterError):
    """The request never got an answer (connection refused or dropped, timeout)."""


class InvalidSignature(Exception):
    """A webhook whose signature, timestamp or headers do not verify."""


def error_for(status: int, body: Any, retry_after: float | None) -> SendlaterError:
    err = body.get("error", {}) if isinstance(body, dict) else {}
    code = err.get("code", "") if isinstance(err, dict) else ""
    message = (err.get("message") if isinstance(err, dict) else None) or f"HTTP {status}"
    kw: dict[str, Any] = {"status": status, "code": code, "body": body}
    if status == 401:
        return AuthenticationError(message, **kw)
    if status == 404:
        return NotFound(message, **kw)
    if status == 409:
        return Conflict(message, **kw)
    if status == 429:
        return RateLimited(message, retry_after=retry_after, **kw)
    if status in (400, 413, 415, 422):
        return ValidationError(message, fields=err.get("fields") or {}, **kw)
    if status >= 500:
        return ServiceUnavailable(message, **kw)
    return SendlaterError(message, **kw)
