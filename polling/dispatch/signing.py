"""Standard Webhooks signatures (webhook-id, webhook-timestamp, webhook-signature).

Signed with the team's ``whsec_`` secret; while a rotation overlaps, the previous
secret signs too and both signatures are sent, space-separated, so receivers holding
either secret verify. The secret is decoded by the ``standardwebhooks`` package (once
per secret); the HMAC is computed here over the body's bytes in one C call
(``hmac.digest``), the package's ``sign`` formula without its str round trip (it
decodes the body and encodes it again: a few us a webhook). Tests check both agree.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
from math import floor

from standardwebhooks.webhooks import Webhook

_SIGNERS_CACHED = 1024  # secrets (teams, plus previous secrets while they rotate)


@lru_cache(maxsize=_SIGNERS_CACHED)
def _key(secret: str) -> bytes:
    # The package decodes the secret's base64 (and refuses an empty one): once per
    # secret, not per delivery.
    return Webhook(secret)._whsecret


def unix_seconds(timestamp: datetime) -> int:
    """``webhook-timestamp``'s value for ``timestamp`` (naive: UTC, as the package reads it)."""
    if timestamp.tzinfo is None:
        timestamp = timestamp.replace(tzinfo=UTC)
    return floor(timestamp.timestamp())


def signature_for(*, secrets: Sequence[str], msg_id: str, seconds: int, body: bytes) -> str:
    """The ``webhook-signature`` value of ``body`` sent at Unix ``seconds``: one
    ``v1,<base64>`` per secret."""
    signed = b"%s.%d.%s" % (msg_id.encode(), seconds, body)
    return " ".join(
        "v1," + base64.b64encode(hmac.digest(_key(secret), signed, "sha256")).decode()
        for secret in secrets
    )


def signature_header(
    *, secrets: Sequence[str], msg_id: str, timestamp: datetime, body: str | bytes
) -> str:
    """Return the ``webhook-signature`` value: one ``v1,<base64>`` per secret."""
    data = body.encode() if isinstance(body, str) else body
    return signature_for(secrets=secrets, msg_id=msg_id, seconds=unix_seconds(timestamp), body=data)


def signed_headers(
    *, secrets: Sequence[str], msg_id: str, timestamp: datetime, body: str | bytes
) -> dict[str, str]:
    """Return the three Standard Webhooks headers for ``body``."""
    seconds = unix_seconds(timestamp)
    data = body.encode() if isinstance(body, str) else body
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(seconds),
        "webhook-signature": signature_for(
            secrets=secrets, msg_id=msg_id, seconds=seconds, body=data
        ),
    }
