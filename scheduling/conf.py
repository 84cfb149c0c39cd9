"""Typed access to the SENDLATER_* settings (read at call time, so tests can override)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings

from scheduling.netguard import Allowlist


def bucket_seconds() -> int:
    return settings.SENDLATER_BUCKET_SECONDS


def default_shards() -> int:
    return settings.SENDLATER_DEFAULT_SHARDS


def max_shards() -> int:
    return settings.SENDLATER_MAX_SHARDS


def close_grace() -> timedelta:
    return timedelta(seconds=settings.SENDLATER_CLOSE_GRACE_SECONDS)


def lease_seconds() -> int:
    return settings.SENDLATER_LEASE_SECONDS


def max_horizon() -> timedelta:
    return timedelta(days=settings.SENDLATER_MAX_HORIZON_DAYS)


def cutover_margin() -> timedelta:
    return timedelta(seconds=settings.SENDLATER_CUTOVER_MARGIN_SECONDS)


def callback_allowlist() -> Allowlist:
    return Allowlist.parse(settings.SENDLATER_CALLBACK_ALLOWLIST)


def max_payload_bytes() -> int:
    return settings.SENDLATER_MAX_PAYLOAD_BYTES


def partition_days() -> int:
    return settings.SENDLATER_PARTITION_DAYS


def retention() -> timedelta:
    return timedelta(days=settings.SENDLATER_RETENTION_DAYS)


def dead_retention() -> timedelta:
    return timedelta(days=settings.SENDLATER_DEAD_RETENTION_DAYS)


def partition_check_seconds() -> float:
    return settings.SENDLATER_PARTITION_CHECK_SECONDS


def prune_seconds() -> float:
    return settings.SENDLATER_PRUNE_SECONDS


def partition_ahead_days() -> int:
    return settings.SENDLATER_PARTITION_AHEAD_DAYS


def schedule_ahead() -> timedelta:
    """Recurring schedules are materialized at least this far ahead of each occurrence."""
    return timedelta(seconds=settings.SENDLATER_SCHEDULE_AHEAD_SECONDS)


def schedule_batch() -> int:
    """Schedules planned per fenced materialization statement."""
    return settings.SENDLATER_SCHEDULE_BATCH


def schedule_ledger_keep() -> timedelta:
    """How long ledger rows stay behind a schedule's cursor before they may be pruned."""
    return timedelta(seconds=settings.SENDLATER_SCHEDULE_LEDGER_KEEP_SECONDS)


def schedule_ledger_prune_seconds() -> float:
    """How often a poller prunes its schedules' ledger rows (0: never)."""
    return settings.SENDLATER_SCHEDULE_LEDGER_PRUNE_SECONDS
