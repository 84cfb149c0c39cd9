"""Console URLs, mounted under /admin/console/ (before the admin's own catch-all)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from polling.console import flows, topics, views

flow_action = admin.site.admin_view(flows.flow_action_view)
endpoint_action = admin.site.admin_view(topics.endpoint_action_view)

urlpatterns = [
    path("", admin.site.admin_view(views.dashboard_view), name="console-dashboard"),
    path("pollers/", admin.site.admin_view(views.pollers_view), name="console-pollers"),
    path("cutovers/", admin.site.admin_view(views.cutovers_view), name="console-cutovers"),
    path("flows/", admin.site.admin_view(flows.flows_view), name="console-flows"),
    path("flows/pause/", flow_action, {"action": "pause"}, name="console-flow-pause"),
    path("flows/resume/", flow_action, {"action": "resume"}, name="console-flow-resume"),
    path("topics/", admin.site.admin_view(topics.topics_view), name="console-topics"),
    path(
        "topics/disable/", endpoint_action, {"action": "disable"}, name="console-endpoint-disable"
    ),
    path("topics/enable/", endpoint_action, {"action": "enable"}, name="console-endpoint-enable"),
]
