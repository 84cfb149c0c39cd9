from __future__ import annotations

from django.db import models


class ProcessedWebhook(models.Model):
    """A webhook-id whose effect has committed; its primary key is the de-duplication."""

    webhook_id = models.CharField(max_length=255, primary_key=True)
    processed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "sendlater_receiver"

    def __str__(self) -> str:
        return self.webhook_id
