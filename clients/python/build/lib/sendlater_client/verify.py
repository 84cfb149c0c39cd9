"""Verify a sendlater webhook (Standard Webhooks signatures)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from .errors import InvalidSignature


def verify(body: bytes | str, headers: Mapping[str, str], secrets: str | Sequence[str]) -> Any:
    """The decoded JSON body if one of ``secrets`` signed it, else InvalidSignature.

    Pass a list during a secret rotation (the new secret and the previous one).
    Stale or future timestamps (beyond five minutes) are refused too.
    """
    if isinstance(secrets, str):
        secrets = [secrets]
    if not secrets:
        raise InvalidSignature("no signing secret configured")
    lowered = {k.lower(): v for k, v in headers.items()}
    payload = body.decode() if isinstance(body, bytes) else body
    failure: Exception | None = None
    for secret in secrets:
        try:
            return Webhook(secret).verify(payload, lowered)
        except WebhookVerificationError as exc:
            failure = exc
        except Exception as exc:  # a malformed secret or header
            failure = exc
    raise InvalidSignature(str(failure)) from failure
