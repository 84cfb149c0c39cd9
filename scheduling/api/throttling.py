"""Per-team request budgets (DRF scoped throttles keyed by team, not by key or IP)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from rest_framework.throttling import ScopedRateThrottle

if TYPE_CHECKING:  # rest_framework.views imports this module through its settings
    from rest_framework.request import Request
    from rest_framework.views import APIView


class TeamScopedRateThrottle(ScopedRateThrottle):
    """``throttle_scope`` on the view picks the rate; the counter is per team.

    Rates are read at each request (not frozen at import like DRF's default), so
    operators change them through settings and tests through override_settings.
    The cache is ``CACHES["default"]``: shared by every gunicorn worker (the
    database cache unless CACHE_URL names another), so a budget is per team, not
    per worker.
    """

    def get_rate(self) -> str | None:
        return settings.REST_FRAMEWORK.get("DEFAULT_THROTTLE_RATES", {}).get(self.scope)

    def allow_request(self, request: Request, view: APIView) -> bool:
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        self.rate = self.get_rate()
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super(ScopedRateThrottle, self).allow_request(request, view)

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        team = getattr(request.user, "team", None)
        if team is None:
            return None  # unauthenticated requests are refused before they count
        return self.cache_format % {"scope": self.scope, "ident": team.pk}
