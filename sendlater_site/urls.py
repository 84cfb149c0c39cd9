"""URL configuration: the admin console and the scheduling API."""

from django.contrib import admin
from django.urls import path

from sendlater_site.health import healthz, readyz
from sendlater_site.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
]
