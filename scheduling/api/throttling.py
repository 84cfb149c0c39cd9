"""Per-team request budgets (DRF scoped throttles keyed by team, not by key or IP)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from rest_framework.throttling import ScopedRateThrottle

from scheduling.api.ratelimit import count_request

if TYPE_CHECKING:  # rest_framework.views imports this module through its settings
    from rest_framework.request import Request
    from rest_framework.views import APIView


class TeamScopedRateThrottle(ScopedRateThrottle):
    """``throttle_scope`` on the view picks the rate; the counter is per team.

    A fixed-window counter rather than DRF's sliding log: the log stores one
    timestamp per request, so a 6000/min budget would rewrite a list of 6,000
    floats on every call; a counter is one small integer. The price is that a
    client may spend up to twice the rate across a window boundary.

    Rates are read at each request (not frozen at import like DRF's default), so
    operators change them through settings and tests through override_settings.
    Each request is counted by one atomic operation in a store every worker shares
    (``scheduling.api.ratelimit``: a one-statement table counter, or Redis), so a
    budget is per team, exact, whatever the number of workers and machines.
    """

    def get_rate(self) -> str | None:
        return settings.REST_FRAMEWORK.get("DEFAULT_THROTTLE_RATES", {}).get(self.scope)

    def allow_request(self, request: Request, view: APIView) -> bool:
        self.scope = getattr(view, self.scope_attr, None)
        self.rate = self.get_rate() if self.scope else None
        key = self.get_cache_key(request, view) if self.rate else None
        if key is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        self.now = self.timer()
        self.window_end = (int(self.now) // self.duration + 1) * self.duration
        count = count_request(key, self.window_end, self.duration)
        return count <= self.num_requests

    def wait(self) -> float:
        return max(self.window_end - self.now, 1.0)

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        team = getattr(request.user, "team", None)
        if team is None:
            return None  # unauthenticated requests are refused before they count
        return self.cache_format % {"scope": self.scope, "ident": team.pk}
