"""Console URLs, mounted under /admin/console/ (before the admin's own catch-all)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from polling.console import views

urlpatterns = [
    path("", admin.site.admin_view(views.dashboard_view), name="console-dashboard"),
    path("pollers/", admin.site.admin_view(views.pollers_view), name="console-pollers"),
    path("cutovers/", admin.site.admin_view(views.cutovers_view), name="console-cutovers"),
]
