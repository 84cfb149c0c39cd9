"""Liveness and readiness probes for load balancers and orchestrators."""

from __future__ import annotations

from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is alive and serving requests; touches nothing else."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Ready when the database answers and every migration is applied."""
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except DatabaseError as error:
        checks["database"] = f"unreachable: {type(error).__name__}"
        return JsonResponse({"status": "unavailable", "checks": checks}, status=503)
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        names = [f"{m.app_label}.{m.name}" for m, _ in pending]
        checks["migrations"] = f"{len(names)} unapplied: {', '.join(names[:5])}"
        return JsonResponse({"status": "unavailable", "checks": checks}, status=503)
    checks["migrations"] = "ok"
    return JsonResponse({"status": "ok", "checks": checks})
