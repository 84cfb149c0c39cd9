"""The job store's enumerations, imported by every module of models (``scheduling.models``
re-exports them), so that no model module has to import another."""

from __future__ import annotations

from django.db import models


class JobStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD = "dead"
    CANCELED = "canceled"
    EXPIRED = "expired"


class TargetKind(models.TextChoices):
    WEBHOOK = "webhook"
    HANDLER = "handler"
