"""Read-only admin for pollers, leases and checkpoints (the console adds actions)."""

from __future__ import annotations

from django.contrib import admin

from polling.models import Poller, ShardCheckpoint, ShardLease


class ReadOnlyAdmin(admin.ModelAdmin):
    """Lease and checkpoint rows change only through polling.claims (fenced)."""

    def get_readonly_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(Poller)
class PollerAdmin(ReadOnlyAdmin):
    list_display = ["name", "state", "host", "pid", "heartbeat_at", "started_at", "version"]
    list_filter = ["state"]


@admin.register(ShardLease)
class ShardLeaseAdmin(ReadOnlyAdmin):
    list_display = ["shard", "owner", "epoch", "expires_at", "pinned_to", "acquired_at"]
    list_filter = ["owner"]


@admin.register(ShardCheckpoint)
class ShardCheckpointAdmin(ReadOnlyAdmin):
    list_display = ["shard", "last_drained", "updated_at"]
