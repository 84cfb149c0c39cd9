"""Per-team request budgets (DRF scoped throttles keyed by team, not by key or IP)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.conf import settings
from rest_framework.throttling import ScopedRateThrottle

from scheduling.api.access.ratelimit import count_request

if TYPE_CHECKING:  # rest_framework.views imports this module through its settings
    from rest_framework.request import Request
    from rest_framework.views import APIView


@dataclass(frozen=True)
class Spent:
    """One request counted against its team's budget: the verdict and, when the
    counting statement read it, the database clock (``None`` otherwise)."""

    allowed: bool
    wait: float
    now: datetime | None = None


@dataclass(frozen=True)
class Budget:
    """Where and how one request of a team is counted: the counter's key, the current
    window (its end in epoch seconds, its length) and how many requests it allows."""

    key: str
    window_end: int
    period: int
    num_requests: int
    wait: float

    def verdict(self, count: int, now: datetime | None = None) -> Spent:
        """The verdict for a request that made the window's count ``count``."""
        return Spent(count <= self.num_requests, self.wait, now)


def budget_of(scope: str | None, team_pk: object) -> Budget | None:
    """The ``scope`` budget of team ``team_pk`` at this moment; None if the scope has no
    rate (such requests are not counted)."""
    rate = settings.REST_FRAMEWORK.get("DEFAULT_THROTTLE_RATES", {}).get(scope) if scope else None
    if not rate:
        return None
    num_requests, duration = ScopedRateThrottle.parse_rate(None, rate)  # type: ignore[arg-type]
    now = TeamScopedRateThrottle.timer()
    window_end = (int(now) // duration + 1) * duration
    key = TeamScopedRateThrottle.cache_format % {"scope": scope, "ident": team_pk}
    return Budget(key, window_end, duration, num_requests, max(window_end - now, 1.0))


def budget_spend(scope: str | None, team_pk: object) -> Spent:
    """Count one request of team ``team_pk`` against the ``scope`` budget.

    What ``TeamScopedRateThrottle`` does per request, callable without DRF's request
    objects (``scheduling.api.jobs.fastpath``); a scope without a rate is not counted.
    """
    budget = budget_of(scope, team_pk)
    if budget is None:
        return Spent(allowed=True, wait=0.0)
    count, db_time = count_request(budget.key, budget.window_end, budget.period)
    return budget.verdict(count, db_time)


class TeamScopedRateThrottle(ScopedRateThrottle):
    """``throttle_scope`` on the view picks the rate; the counter is per team.

    A fixed-window counter rather than DRF's sliding log: the log stores one
    timestamp per request, so a 6000/min budget would rewrite a list of 6,000
    floats on every call; a counter is one small integer. The price is that a
    client may spend up to twice the rate across a window boundary.

    Rates are read at each request (not frozen at import like DRF's default), so
    operators change them through settings and tests through override_settings.
    Each request is counted by one atomic operation in a store every worker shares
    (``scheduling.api.access.ratelimit``: a one-statement table counter, or Redis), so a
    budget is per team, exact, whatever the number of workers and machines.

    A request the fast path already counted (``request.sendlater_spent``, set when it
    hands the request to DRF) is not counted again: its verdict stands.
    """

    def get_rate(self) -> str | None:
        return settings.REST_FRAMEWORK.get("DEFAULT_THROTTLE_RATES", {}).get(self.scope)

    def allow_request(self, request: Request, view: APIView) -> bool:
        self.spent = getattr(request, "sendlater_spent", None)
        if self.spent is None:
            team = getattr(request.user, "team", None)
            if team is None:
                return True  # unauthenticated requests are refused before they count
            self.spent = budget_spend(getattr(view, self.scope_attr, None), team.pk)
        return self.spent.allowed

    def wait(self) -> float:
        return self.spent.wait
