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
    # A topic job past its due time: one child job per endpoint took its place
    # (``polling.writing.fanout``); the API derives ``delivered`` from the children.
    FANNED_OUT = "fanned_out"


class TargetKind(models.TextChoices):
    WEBHOOK = "webhook"
    HANDLER = "handler"
    TOPIC = "topic"


class EndpointState(models.TextChoices):
    ENABLED = "enabled"
    DISABLED = "disabled"
