"""Standard Webhooks signatures (webhook-id, webhook-timestamp, webhook-signature).

Signed with the team's ``whsec_`` secret by the ``standardwebhooks`` package; while
a rotation overlaps, the previous secret signs too and both signatures are sent,
space-separated, so receivers holding either secret verify.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache

from standardwebhooks.webhooks import Webhook

_SIGNERS_CACHED = 1024  # secrets (teams, plus previous secrets while they rotate)


@lru_cache(maxsize=_SIGNERS_CACHED)
def _signer(secret: str) -> Webhook:
    # Building a Webhook decodes the secret's base64: once per secret, not per delivery.
    return Webhook(secret)


def signature_header(
    *, secrets: Sequence[str], msg_id: str, timestamp: datetime, body: str | bytes
) -> str:
    """Return the ``webhook-signature`` value: one ``v1,<base64>`` per secret."""
    data = body.decode() if isinstance(body, bytes) else body
    return " ".join(
        _signer(secret).sign(msg_id=msg_id, timestamp=timestamp, data=data) for secret in secrets
    )


def signed_headers(
    *, secrets: Sequence[str], msg_id: str, timestamp: datetime, body: str | bytes
) -> dict[str, str]:
    """Return the three Standard Webhooks headers for ``body``."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": signature_header(
            secrets=secrets, msg_id=msg_id, timestamp=timestamp, body=body
        ),
    }
