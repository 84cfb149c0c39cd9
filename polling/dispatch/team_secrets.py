"""The signing secrets each team's webhooks are signed with, read once per batch."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from polling.common.database_time import DB_TIME
from polling.common.sql import fetch_all, placeholders, to_dt
from scheduling.storage.prepared import prepared_fetchone

SecretsLookup = Callable[[Iterable[int]], dict[int, list[str]]]

_SECRETS_SQL = (
    "SELECT id, signing_secret, previous_signing_secret, previous_signing_secret_expires_at"
    " FROM scheduling_team WHERE id {match}"
)
_ONE_TEAM_SQL = _SECRETS_SQL.format(match="= %s")


def team_signing_secrets(team_ids: Iterable[int]) -> dict[int, list[str]]:
    """Map team id -> secrets to sign with: the current one, plus the previous
    one while its rotation overlap has not expired. One query for the batch.

    A sink asks for every few jobs it sends (a host's lane releases a few at a time),
    so this is a plain statement, not the ORM: one team (the common batch) is one
    prepared statement, ~76 us of CPU against ~640 through a queryset (measured
    here; docs/performance.md). Read each time, so a rotation signs the very next
    delivery with both secrets.
    """
    ids = sorted(set(team_ids))
    if not ids:
        return {}
    if len(ids) == 1:
        row = prepared_fetchone(_ONE_TEAM_SQL, ids)
        rows = [] if row is None else [row]
    else:
        rows = fetch_all(_SECRETS_SQL.format(match=f"IN ({placeholders(len(ids))})"), ids)
    now = DB_TIME.now()  # the database's clock, as the rotation's expiry was written
    secrets: dict[int, list[str]] = {}
    for team_id, current, previous, previous_until in rows:
        keys = [current] if current else []
        until = to_dt(previous_until)
        if previous and until and until > now:
            keys.append(previous)
        secrets[int(team_id)] = keys
    return secrets
