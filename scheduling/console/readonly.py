"""A model admin that shows rows and never writes them: no add, no form save, no delete.

Rows of these models change only through their services and fenced statements (jobs:
``scheduling.jobs.services``, whose lock order a form save or a delete would bypass;
leases and checkpoints: the pollers' fenced statements). Actions still run, each
through its own service and confirmation page.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyAdmin(admin.ModelAdmin):
    """Every field read-only; add, change (form save) and delete refused."""

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
