"""Admin for teams, jobs, buckets and the shard-count schedule (read-mostly)."""

from __future__ import annotations

from django.contrib import admin

from scheduling.models import Bucket, Job, ShardCountSchedule, Team


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "team", "status", "due_at", "bucket", "shard", "attempts", "target"]
    list_filter = ["status", "target_kind", "team"]
    search_fields = ["=id", "idempotency_key", "target"]
    date_hierarchy = "due_at"
    show_full_result_count = False
    list_select_related = ["team"]

    def get_readonly_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        # Jobs change only through services (bucket, shard and claims are derived).
        return [f.name for f in Job._meta.fields]

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(Bucket)
class BucketAdmin(admin.ModelAdmin):
    list_display = ["start", "shard_count", "recorded_at"]
    readonly_fields = ["start", "shard_count", "recorded_at"]
    date_hierarchy = "start"

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(ShardCountSchedule)
class ShardCountScheduleAdmin(admin.ModelAdmin):
    list_display = ["effective_from", "shard_count", "reason", "created_at"]
    readonly_fields = ["effective_from", "shard_count", "reason", "created_at"]

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        # Cutovers go through cutover_schedule (validation, margin); see the console.
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False
