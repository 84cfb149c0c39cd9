"""Authentication by team API key: ``Authorization: Bearer <key>``."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from scheduling.models import ApiKey, Team
from scheduling.teams import api_key_check

KEYWORD = "Bearer"


@dataclass(frozen=True)
class TeamPrincipal:
    """``request.user`` for an API call: the team behind the key."""

    team: Team
    api_key: ApiKey
    is_authenticated: bool = True
    is_anonymous: bool = False

    @property
    def pk(self) -> int:
        # Throttles key their counters on this: one budget per team, all keys.
        return self.team.pk


class BearerKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[TeamPrincipal, ApiKey] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != KEYWORD.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "Authorization header must be 'Bearer <key>'.", code="invalid_api_key"
            )
        try:
            key = header[1].decode("ascii")
        except UnicodeDecodeError as error:
            raise exceptions.AuthenticationFailed("Invalid API key.", "invalid_api_key") from error
        api_key = api_key_check(key)
        if api_key is None:
            # Unknown and revoked keys look alike from outside.
            raise exceptions.AuthenticationFailed(
                "Invalid or revoked API key.", code="invalid_api_key"
            )
        return TeamPrincipal(team=api_key.team, api_key=api_key), api_key

    def authenticate_header(self, request: Request) -> str:
        # A WWW-Authenticate value makes DRF answer 401 (not 403) without a key.
        return f'{KEYWORD} realm="api"'
