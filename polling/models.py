"""Pollers, their shard leases (with fencing epochs) and per-shard checkpoints.

Rows change only through ``polling.reading.take`` (the fenced statements) and the
services in ``polling.ownership.registration``; the admin shows them read-only.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class PollerState(models.TextChoices):
    ACTIVE = "active"
    DRAINING = "draining"
    STOPPED = "stopped"


class Poller(models.Model):
    """A ``runpoller`` process: registered at start, heartbeating while alive."""

    name = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=255, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    state = models.CharField(max_length=16, choices=PollerState.choices, default=PollerState.ACTIVE)
    version = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"


class ShardLease(models.Model):
    """Who owns shard index ``shard`` until ``expires_at``.

    ``epoch`` is the fencing token: every acquisition increments it, and every
    claim, write-back and checkpoint write checks owner, epoch and expiry in the
    same statement. ``pinned_to`` (an operator move) overrides the hash.
    """

    shard = models.PositiveIntegerField(unique=True)
    owner = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001 (NULL = free)
    epoch = models.BigIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)
    pinned_to = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001 (NULL = by hash)

    class Meta:
        ordering = ["shard"]
        indexes = [models.Index(fields=["owner"], name="shardlease_owner")]
        # The operator console's gates (both live here so scheduling needs no migration).
        permissions = [
            ("move_shards", "Can pin and unpin shards, drain pollers and release leases"),
            ("schedule_cutover", "Can schedule a reshard cutover"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(epoch__gte=0), name="shardlease_epoch_nonneg"),
        ]

    def __str__(self) -> str:
        return f"shard {self.shard}: {self.owner or '-'} epoch {self.epoch}"


class ShardCheckpoint(models.Model):
    """The last bucket fully drained for shard index ``shard`` (NULL: none yet)."""

    shard = models.PositiveIntegerField(unique=True)
    last_drained = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["shard"]

    def __str__(self) -> str:
        drained = self.last_drained.isoformat() if self.last_drained else "-"
        return f"shard {self.shard}: drained through {drained}"


class HostShare(models.Model):
    """One poller's share of a receiving host's concurrency (``polling.flow.host_shares``).

    ``demand``: the host's jobs this poller has in its window; ``share``: how many it
    may have in flight at once. The shares of one host add up to at most its cap.
    """

    host = models.CharField(max_length=300)  # "name:port" (polling.dispatch.hosts.host_key)
    owner = models.CharField(max_length=200)
    demand = models.PositiveIntegerField(default=0)
    share = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["host", "owner"]
        constraints = [
            models.UniqueConstraint(fields=["host", "owner"], name="hostshare_host_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.host}: {self.owner} {self.share}/{self.demand}"
