"""The signing secrets each team's webhooks are signed with, read once per batch."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from polling.common.database_time import DB_TIME
from scheduling.models import Team

SecretsLookup = Callable[[Iterable[int]], dict[int, list[str]]]


def team_signing_secrets(team_ids: Iterable[int]) -> dict[int, list[str]]:
    """Map team id -> secrets to sign with: the current one, plus the previous
    one while its rotation overlap has not expired. One query for the batch."""
    now = DB_TIME.now()  # the database's clock, as the rotation's expiry was written
    secrets: dict[int, list[str]] = {}
    rows = Team.objects.filter(id__in=set(team_ids)).values_list(
        "id", "signing_secret", "previous_signing_secret", "previous_signing_secret_expires_at"
    )
    for team_id, current, previous, previous_until in rows:
        keys = [current] if current else []
        if previous and previous_until and previous_until > now:
            keys.append(previous)
        secrets[team_id] = keys
    return secrets
