"""Standard Webhooks signatures (webhook-id, webhook-timestamp, webhook-signature).

Signed with the team's ``whsec_`` secret by the ``standardwebhooks`` package; while
a rotation overlaps, the previous secret signs too and both signatures are sent,
space-separated, so receivers holding either secret verify.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from standardwebhooks.webhooks import Webhook


def signature_header(*, secrets: Sequence[str], msg_id: str, timestamp: datetime, body: str) -> str:
    """Return the ``webhook-signature`` value: one ``v1,<base64>`` per secret."""
    return " ".join(
        Webhook(secret).sign(msg_id=msg_id, timestamp=timestamp, data=body) for secret in secrets
    )


def signed_headers(
    *, secrets: Sequence[str], msg_id: str, timestamp: datetime, body: str
) -> dict[str, str]:
    """Return the three Standard Webhooks headers for ``body``."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": signature_header(
            secrets=secrets, msg_id=msg_id, timestamp=timestamp, body=body
        ),
    }
