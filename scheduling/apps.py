from django.apps import AppConfig
from django.conf import settings


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from scheduling import handlers, tasks  # noqa: F401 (tasks registers "django.task")

        handlers.load_modules(settings.SENDLATER_HANDLER_MODULES)
