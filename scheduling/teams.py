"""Teams, their API keys and their webhook signing secrets (writes, and the key check)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils.text import slugify

from scheduling.errors import SchedulingError
from scheduling.models import ApiKey, Team, signing_secret_generate
from scheduling.sharding.clock import db_now

API_KEY_PREFIX = "sl_"
_PREFIX_BYTES = 6  # 12 hex characters: the indexed lookup part
_SECRET_BYTES = 32  # 256 random bits: what makes the key unguessable


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def team_get_or_create(*, slug: str, name: str = "") -> tuple[Team, bool]:
    """Return the team ``slug``, creating it (with a signing secret) if needed."""
    if not slug or slugify(slug) != slug:
        raise SchedulingError(f"{slug!r} is not a valid slug (a-z, 0-9, -, _).", field="slug")
    try:
        with transaction.atomic():
            return Team.objects.get_or_create(
                slug=slug, defaults={"name": name or slug.replace("-", " ").title()}
            )
    except IntegrityError:
        # Another process created it between our read and insert.
        return Team.objects.get(slug=slug), False


def team_rotate_signing_secret(
    *, team: Team, overlap_seconds: int, now: datetime | None = None
) -> Team:
    """Give ``team`` a new signing secret; the old one stays valid for ``overlap_seconds``.

    While the overlap lasts, deliveries carry signatures by both secrets (Standard
    Webhooks allows several), so receivers can switch at their own pace.
    """
    if overlap_seconds < 0:
        raise SchedulingError("overlap_seconds must not be negative.", field="overlap_seconds")
    now = now or db_now()
    with transaction.atomic():
        team = Team.objects.select_for_update().get(pk=team.pk)
        team.previous_signing_secret = team.signing_secret
        team.previous_signing_secret_expires_at = now + timedelta(seconds=overlap_seconds)
        team.signing_secret = signing_secret_generate()
        team.save(
            update_fields=[
                "signing_secret",
                "previous_signing_secret",
                "previous_signing_secret_expires_at",
            ]
        )
    return team


def api_key_create(*, team: Team, name: str = "") -> tuple[ApiKey, str]:
    """Create an API key for ``team``; return the row and the key (shown only now)."""
    prefix = secrets.token_hex(_PREFIX_BYTES)
    key = f"{API_KEY_PREFIX}{prefix}_{secrets.token_urlsafe(_SECRET_BYTES)}"
    api_key = ApiKey.objects.create(team=team, name=name, prefix=prefix, key_hash=_hash(key))
    return api_key, key


def api_key_revoke(*, api_key: ApiKey, now: datetime | None = None) -> ApiKey:
    """Revoke a key: requests bearing it are refused from now on."""
    if api_key.revoked_at is None:
        api_key.revoked_at = now or db_now()
        api_key.save(update_fields=["revoked_at"])
        api_key_cache_clear()  # at once in this process; others within the cache's TTL
    return api_key


# Verified keys, per process: sha256 of the key -> (key row with its team, monotonic
# expiry). A hit costs no query; a revoked key keeps working here for at most
# SENDLATER_API_KEY_CACHE_SECONDS (docs/api.md). Only keys that proved valid are kept.
_verified: dict[str, tuple[ApiKey, float]] = {}
_VERIFIED_MAX = 10_000  # past this many, start again (a bound on memory, not an LRU)


def api_key_check(key: str) -> ApiKey | None:
    """Return the live key row that ``key`` proves, with its team, or None.

    A key verified within the last SENDLATER_API_KEY_CACHE_SECONDS is taken from
    this process's memory without a query.
    """
    ttl = settings.SENDLATER_API_KEY_CACHE_SECONDS
    digest = _hash(key)
    cached = _verified.get(digest)
    if cached is not None and cached[1] > time.monotonic():
        return cached[0]
    api_key = _api_key_lookup(key, digest)
    if api_key is None:
        _verified.pop(digest, None)
    elif ttl > 0:
        if len(_verified) >= _VERIFIED_MAX:
            _verified.clear()
        _verified[digest] = (api_key, time.monotonic() + ttl)
    return api_key


def api_key_cache_clear() -> None:
    """Forget every verified key of this process (tests; a revocation here)."""
    _verified.clear()


def _api_key_lookup(key: str, digest: str) -> ApiKey | None:
    if not key.startswith(API_KEY_PREFIX):
        return None
    prefix, sep, _secret = key[len(API_KEY_PREFIX) :].partition("_")
    if not sep or len(prefix) != 2 * _PREFIX_BYTES:
        return None
    api_key = (
        ApiKey.objects.select_related("team").filter(prefix=prefix, revoked_at__isnull=True).first()
    )
    if api_key is None or not hmac.compare_digest(api_key.key_hash, digest):
        return None
    return api_key
