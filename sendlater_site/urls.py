"""URL configuration: the admin console, the scheduling API and its OpenAPI docs."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path, re_path
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from scheduling.api.errors import error_body
from sendlater_site.health import healthz, readyz
from sendlater_site.metrics import metrics_view

# The admin is the operators' console: it names the product, not "Django administration".
admin.site.site_header = "sendlater console"
admin.site.site_title = "sendlater console"
admin.site.index_title = "Operations"

urlpatterns = [
    # Before admin.site.urls, whose app-index pattern would claim "console".
    path("admin/console/", include("polling.console.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("scheduling.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
]


@csrf_exempt  # an API URL: no session, no CSRF token, and always this JSON 404
def api_not_found(request: HttpRequest) -> HttpResponse:
    """No such API URL (e.g. a path id that is not a UUID): JSON, with DEBUG on too."""
    return JsonResponse(error_body("not_found", "Not found."), status=404)


# Last: only what no route above matched.
urlpatterns.append(re_path(r"^api/v1/", api_not_found))


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Unknown URLs under /api/ answer in the API's error shape, not an HTML page."""
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    return defaults.page_not_found(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    """A crash under /api/ still answers JSON (the traceback goes to the log)."""
    if request.path.startswith("/api/"):
        return JsonResponse(
            error_body("server_error", "Internal server error; it has been logged."), status=500
        )
    return defaults.server_error(request)
