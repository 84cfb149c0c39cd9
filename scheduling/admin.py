"""Admin for teams, jobs, buckets and the shard-count schedule (read-mostly).

The jobs changelist lives in scheduling.console.jobs; it is registered by polling.admin
with the console's actions (polling.console.jobs).
"""

from __future__ import annotations

from django.contrib import admin, messages

from scheduling.models import ApiKey, Bucket, ShardCountSchedule, Team
from scheduling.teams import api_key_revoke, team_rotate_signing_secret

SIGNING_SECRET_OVERLAP_SECONDS = 24 * 3600  # receivers get a day to switch


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    readonly_fields = ["signing_secret", "previous_signing_secret_expires_at"]
    exclude = ["previous_signing_secret"]
    actions = ["rotate_signing_secret"]

    @admin.action(description="Rotate webhook signing secret (old one valid 24 h)")
    def rotate_signing_secret(self, request, queryset):  # type: ignore[no-untyped-def]
        for team in queryset:
            team_rotate_signing_secret(team=team, overlap_seconds=SIGNING_SECRET_OVERLAP_SECONDS)
        self.message_user(request, f"Rotated {queryset.count()} signing secret(s).")


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["__str__", "team", "name", "created_at", "revoked_at"]
    list_filter = ["team", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["prefix", "name", "team__slug"]
    readonly_fields = ["team", "prefix", "created_at", "revoked_at"]
    fields = ["team", "name", "prefix", "created_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        # The key is shown once at creation: `manage.py create_api_key --team <slug>`.
        return False

    @admin.action(description="Revoke selected API keys", permissions=["change"])
    def revoke(self, request, queryset):  # type: ignore[no-untyped-def]
        keys = list(queryset.filter(revoked_at__isnull=True))
        for api_key in keys:
            api_key_revoke(api_key=api_key)
        self.message_user(request, f"Revoked {len(keys)} API key(s).", messages.SUCCESS)


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
