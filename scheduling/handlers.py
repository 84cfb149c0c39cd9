"""In-process handlers: jobs whose target is a registered Python callable.

A handler takes a ``Delivery`` (job id, attempt, payload, metadata, due time; for an
occurrence of a recurring schedule also its ``schedule_id`` and ``scheduled_for``) and
returns normally on success or raises on failure. The API checks handler names
against this registry; pollers call the handler by name. Projects register their
own with ``@register("name")`` in a module listed in SENDLATER_HANDLER_MODULES.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from importlib import import_module
from typing import Any
from uuid import UUID

logger = logging.getLogger(__name__)

HANDLER_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$"


@dataclass(frozen=True)
class Delivery:
    job_id: UUID
    attempt: int
    due_at: datetime
    payload: Any
    metadata: dict[str, str] = field(default_factory=dict)
    # Set for an occurrence of a recurring schedule.
    schedule_id: UUID | None = None
    scheduled_for: datetime | None = None


Handler = Callable[[Delivery], None]

_registry: dict[str, Handler] = {}
_inline: set[str] = set()


def register(name: str, *, inline: bool = False) -> Callable[[Handler], Handler]:
    """Register ``fn`` as the handler ``name`` (decorator).

    ``inline``: the handler returns at once and never blocks (no I/O, no locks), so
    a poller may call it on its own thread instead of handing it to a worker thread.
    """

    def decorate(fn: Handler) -> Handler:
        if name in _registry and _registry[name] is not fn:
            raise ValueError(f"handler {name!r} is already registered")
        _registry[name] = fn
        if inline:
            _inline.add(name)
        return fn

    return decorate


def is_inline(name: str) -> bool:
    return name in _inline


def get(name: str) -> Handler:
    """Return the handler registered as ``name``; KeyError if there is none."""
    return _registry[name]


def names() -> list[str]:
    return sorted(_registry)


def is_registered(name: str) -> bool:
    return name in _registry


def load_modules(module_paths: list[str]) -> None:
    """Import the modules that register project handlers."""
    for path in module_paths:
        import_module(path)


@register("noop", inline=True)
def noop(delivery: Delivery) -> None:
    """Accepts every job and does nothing: the sink for benchmarks."""


@register("log")
def log(delivery: Delivery) -> None:
    """Logs each job it receives."""
    logger.info(
        "handler log: job=%s attempt=%s due_at=%s payload=%r",
        delivery.job_id,
        delivery.attempt,
        delivery.due_at.isoformat(),
        delivery.payload,
    )
