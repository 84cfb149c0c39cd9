"""Typed access to the pollers' SENDLATER_* settings (read at call time)."""

from __future__ import annotations

from django.conf import settings


def retry_base_seconds() -> float:
    return float(settings.SENDLATER_RETRY_BASE_SECONDS)


def retry_cap_seconds() -> float:
    return float(settings.SENDLATER_RETRY_CAP_SECONDS)


def max_attempts() -> int:
    return int(settings.SENDLATER_MAX_ATTEMPTS)


def poll_interval_seconds() -> float:
    return float(settings.SENDLATER_POLL_INTERVAL_SECONDS)


def wake_listen() -> bool:
    """Whether a poller listens for other pollers' wake-ups (``polling.common.wakeups``)."""
    return bool(settings.SENDLATER_WAKE_LISTEN)


def batch_size() -> int:
    return int(settings.SENDLATER_BATCH_SIZE)


def concurrency() -> int:
    return int(settings.SENDLATER_CONCURRENCY)


def window() -> int:
    """Jobs in flight per poller: read and not yet written back."""
    return int(settings.SENDLATER_WINDOW)


def webhook_max_per_host() -> int:
    """A receiving host's concurrency cap, for all pollers together."""
    return int(settings.SENDLATER_WEBHOOK_MAX_PER_HOST)


def webhook_queue_seconds() -> float:
    """How much of a host's work a poller sends ahead: what its share starts within this."""
    return float(settings.SENDLATER_WEBHOOK_QUEUE_SECONDS)


def writeback_group() -> int:
    return int(settings.SENDLATER_WRITEBACK_GROUP)


def writeback_seconds() -> float:
    return float(settings.SENDLATER_WRITEBACK_MILLISECONDS) / 1000


def rescan_seconds() -> float:
    """How often a poller re-reads a (shard, bucket) with jobs in flight from its start,
    for rows written behind its read cursor (late writes); ``polling.reading.cursors``."""
    return float(settings.SENDLATER_RESCAN_MILLISECONDS) / 1000


def sweep_seconds() -> float:
    return float(settings.SENDLATER_SWEEP_SECONDS)


def shutdown_grace_seconds() -> float:
    return float(settings.SENDLATER_SHUTDOWN_GRACE_SECONDS)


def sinks() -> dict[str, str]:
    return dict(settings.SENDLATER_SINKS)


def dispatch_stall_seconds() -> float:
    """A dispatch with no delivery finished for this long is stuck (its leases lapse):
    the longest one webhook delivery may take (pool wait, connect, write, read)."""
    return float(
        settings.SENDLATER_WEBHOOK_CONNECT_TIMEOUT_SECONDS
        + 3 * settings.SENDLATER_WEBHOOK_READ_TIMEOUT_SECONDS
    )
