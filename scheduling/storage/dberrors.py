"""The SQLSTATE behind a database error Django raised, and the ones we act on."""

from __future__ import annotations

LOCK_NOT_AVAILABLE = "55P03"  # lock_not_available: a lock_timeout expired


def sqlstate_of(error: BaseException) -> str | None:
    """The SQLSTATE of ``error`` or of the driver error Django wrapped in it."""
    return getattr(error.__cause__, "sqlstate", None) or getattr(error, "sqlstate", None)


def is_lock_timeout(error: BaseException) -> bool:
    return sqlstate_of(error) == LOCK_NOT_AVAILABLE
