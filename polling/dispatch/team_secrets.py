"""The signing secrets each team's webhooks are signed with: read for a batch, and kept
for a second by the sink that signs (``SecretsCache``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from polling.common.database_time import DB_TIME
from scheduling.models import Team

SecretsLookup = Callable[[Iterable[int]], dict[int, list[str]]]

# How long a sink keeps a team's secrets: a rotation (or a new secret) signs every
# delivery sent this long after it. Within it a delivery may still carry only the old
# secret's signature, which receivers keep accepting through the rotation's overlap.
SECRETS_KEPT_SECONDS = 1.0


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


class SecretsCache:
    """``lookup`` with each team's answer kept for ``seconds``: a sink submits a few
    jobs at a time (a host's or a key's share of a read), and one query each was 2 to
    5 % of a poller's CPU (docs/performance.md). A team the lookup does not know (gone)
    is kept as having no secret."""

    def __init__(
        self,
        lookup: SecretsLookup = team_signing_secrets,
        *,
        seconds: float = SECRETS_KEPT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lookup = lookup
        self.seconds = seconds
        self.clock = clock
        self._known: dict[int, list[str]] = {}
        self._until = 0.0  # all of _known is forgotten then

    def __call__(self, team_ids: Iterable[int]) -> dict[int, list[str]]:
        now = self.clock()
        if now >= self._until:
            self._known.clear()
            self._until = now + self.seconds
        known, out, missing = self._known, {}, []
        for team_id in set(team_ids):
            keys = known.get(team_id)
            if keys is None:
                missing.append(team_id)
            else:
                out[team_id] = keys
        if missing:
            found = self.lookup(missing)
            for team_id in missing:
                out[team_id] = known[team_id] = found.get(team_id, [])
        return out
