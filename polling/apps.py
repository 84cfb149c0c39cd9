from django.apps import AppConfig


class PollingConfig(AppConfig):
    name = "polling"
    verbose_name = "Polling"
    default_auto_field = "django.db.models.BigAutoField"
