"""Writes of flow control: set, remove, pause and resume a team's key limits."""

from __future__ import annotations

from django.db import transaction

from scheduling.errors import FlowControlNotFound, InvalidFlowControl
from scheduling.flow.models import FlowControl
from scheduling.models import Team
from scheduling.sharding.clock import db_now

KEY_MAX_CHARS = 100
# A key is a path segment of /api/v1/flow-controls/{key}: no "/"; and no NUL, which
# PostgreSQL cannot store (scheduling.api.contract.FLOW_CONTROL_KEY says the same).
KEY_FORBIDDEN_CHARS = ("/", "\x00")
PERIOD_MIN_SECONDS = 1
PERIOD_MAX_SECONDS = 86_400  # one day
# The columns' bound (a PostgreSQL integer); far beyond any useful limit.
RATE_MAX = 1_000_000_000
PARALLELISM_MAX = 1_000_000


def key_validate(key: object, *, field: str = "key") -> None:
    """Raise InvalidFlowControl naming ``field`` unless ``key`` is a usable key."""
    if not isinstance(key, str) or not 1 <= len(key) <= KEY_MAX_CHARS:
        raise InvalidFlowControl(f"a key is 1 to {KEY_MAX_CHARS} characters", field=field)
    if any(char in key for char in KEY_FORBIDDEN_CHARS):
        raise InvalidFlowControl("a key must not contain '/' or NUL characters", field=field)


def limits_validate(
    *, key: str, rate: int | None, period_seconds: int, parallelism: int | None
) -> None:
    """Raise InvalidFlowControl naming the field at fault (the API's serializer checks
    the same rules first; this guards every other caller)."""
    key_validate(key)
    if rate is not None and not 1 <= rate <= RATE_MAX:
        raise InvalidFlowControl(f"rate must be between 1 and {RATE_MAX}", field="rate")
    if not PERIOD_MIN_SECONDS <= period_seconds <= PERIOD_MAX_SECONDS:
        raise InvalidFlowControl(
            f"period_seconds must be between {PERIOD_MIN_SECONDS} and {PERIOD_MAX_SECONDS}",
            field="period_seconds",
        )
    if parallelism is not None and not 1 <= parallelism <= PARALLELISM_MAX:
        raise InvalidFlowControl(
            f"parallelism must be between 1 and {PARALLELISM_MAX}", field="parallelism"
        )
    if rate is None and parallelism is None:
        raise InvalidFlowControl("give rate, parallelism or both", field="rate")


def flow_limits_set(
    *,
    team: Team,
    key: str,
    rate: int | None,
    period_seconds: int = 1,
    parallelism: int | None = None,
) -> tuple[FlowControl, bool]:
    """Set ``key``'s limits (a PUT: what is not given is no longer limited).

    Returns the row and whether it was created. The pause state and the counters
    are kept: a new rate applies from the key's next free slot on.
    """
    limits_validate(key=key, rate=rate, period_seconds=period_seconds, parallelism=parallelism)
    now = db_now()
    with transaction.atomic():
        flow, created = FlowControl.objects.select_for_update().get_or_create(
            team=team,
            key=key,
            defaults={
                "rate": rate,
                "period_seconds": period_seconds,
                "parallelism": parallelism,
                "created_at": now,
                "updated_at": now,
            },
        )
        if not created:
            flow.rate, flow.period_seconds, flow.parallelism = rate, period_seconds, parallelism
            flow.updated_at = now
            flow.save(update_fields=["rate", "period_seconds", "parallelism", "updated_at"])
    return flow, created


def flow_limits_delete(*, team: Team, key: str) -> None:
    """Remove ``key``'s limits and pause: its jobs go out as unlimited traffic."""
    deleted, _ = FlowControl.objects.filter(team=team, key=key).delete()
    if not deleted:
        raise FlowControlNotFound(f"no flow control for key {key!r}")


def flow_pause_set(*, team: Team, key: str, paused: bool) -> FlowControl:
    """Pause or resume ``key``. Pausing a key without limits records it (paused, no
    limits); a paused key's due jobs stay pending and start in due order on resume."""
    key_validate(key)
    now = db_now()
    with transaction.atomic():
        flow = FlowControl.objects.select_for_update().filter(team=team, key=key).first()
        if flow is None:
            if not paused:
                raise FlowControlNotFound(f"no flow control for key {key!r}")
            # get_or_create: a concurrent pause or PUT of the same new key makes the
            # row first (flowcontrol_team_key_uniq); then this pauses that row.
            flow, created = FlowControl.objects.get_or_create(
                team=team,
                key=key,
                defaults={"paused": True, "created_at": now, "updated_at": now},
            )
            if created:
                return flow
            flow = FlowControl.objects.select_for_update().get(pk=flow.pk)
        if flow.paused != paused:
            flow.paused, flow.updated_at = paused, now
            flow.save(update_fields=["paused", "updated_at"])
    return flow
