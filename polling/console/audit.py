"""Audit entries for operator actions: a LogEntry whose message carries the reason."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import Model

logger = logging.getLogger("polling.console")


def audit(*, user: Any, obj: Model, action: str, reason: str) -> LogEntry:
    """Record ``action`` on ``obj`` by ``user`` with the operator's ``reason``.

    The entry shows in the object's admin history and in "Recent actions"; the
    same line goes to the log so a log pipeline sees every move too.
    """
    message = f"{action} Reason: {reason}"
    logger.info("console: %s by %s on %s", message, user.get_username(), obj)
    entries = LogEntry.objects.log_actions(
        user_id=user.pk,
        queryset=[obj],
        action_flag=CHANGE,
        change_message=message,
        single_object=True,
    )
    return entries
