from __future__ import annotations

from django.apps import AppConfig


class SendlaterReceiverConfig(AppConfig):
    name = "sendlater_client.django"
    label = "sendlater_receiver"
    verbose_name = "sendlater webhooks received"
    default_auto_field = "django.db.models.BigAutoField"
