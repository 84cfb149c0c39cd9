"""Admin for pollers, leases and checkpoints: read-only rows, console actions.

Rows never change through a form; the ownership actions (polling.console.actions)
go through polling.ownership.registration and its fenced statements, gated by move_shards.
"""

from __future__ import annotations

from django.contrib import admin

from polling.console.actions import (
    ConsoleActionsMixin,
    drain_pollers,
    pin_shards,
    release_leases,
    resume_pollers,
    unpin_shards,
)
from polling.console.jobs import ConsoleJobAdmin
from polling.console.schedules import ScheduleAdmin
from polling.models import Poller, ShardCheckpoint, ShardLease
from scheduling.console.readonly import ReadOnlyAdmin
from scheduling.flow.models import FlowControl
from scheduling.models import Job, Schedule


@admin.register(Poller)
class PollerAdmin(ConsoleActionsMixin, ReadOnlyAdmin):
    list_display = ["name", "state", "host", "pid", "heartbeat_at", "started_at", "version"]
    list_filter = ["state"]
    actions = [drain_pollers, resume_pollers]


@admin.register(ShardLease)
class ShardLeaseAdmin(ConsoleActionsMixin, ReadOnlyAdmin):
    list_display = ["shard", "owner", "epoch", "expires_at", "pinned_to", "acquired_at"]
    list_filter = ["owner"]
    actions = [pin_shards, unpin_shards, release_leases]


@admin.register(ShardCheckpoint)
class ShardCheckpointAdmin(ReadOnlyAdmin):
    list_display = ["shard", "last_drained", "updated_at"]


# The scheduling app's Schedule, here because its actions use the console's
# confirmation and audit (scheduling never imports polling).
admin.site.register(Schedule, ScheduleAdmin)
# The same for jobs: cancel, fire now, reschedule and requeue with a reason and an audit
# entry; no delete.
admin.site.register(Job, ConsoleJobAdmin)


@admin.register(FlowControl)
class FlowControlAdmin(ReadOnlyAdmin):
    """Flow-control keys, read-only: teams set them through the API, operators pause
    and resume them on the console's flow page (with a reason, kept in each row's
    history here)."""

    list_display = ["team", "key", "rate", "period_seconds", "parallelism", "paused", "updated_at"]
    list_filter = ["paused", "team"]
    search_fields = ["=key", "=team__slug"]
    list_select_related = ["team"]
    ordering = ["team", "key"]
