from django.apps import AppConfig
from django.conf import settings


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from scheduling import handlers, tasks, tracing  # noqa: F401 (tasks registers "django.task")

        handlers.load_modules(settings.SENDLATER_HANDLER_MODULES)
        # Off unless OTEL_TRACES_EXPORTER names an exporter (docs/operations.md, "Traces").
        # Here, before the WSGI handler loads the middleware: the Django instrumentation
        # adds its own.
        tracing.install_from_env()
