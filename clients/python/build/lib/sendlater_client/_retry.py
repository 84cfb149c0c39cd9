"""When to retry, and how long to wait: shared by both clients."""

from __future__ import annotations

import random
from dataclasses import dataclass

import httpx

RETRY_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4  # tries in all, the first included
    backoff_seconds: float = 0.5  # doubled each try, with jitter
    max_backoff_seconds: float = 30.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff_seconds)
        base = min(self.backoff_seconds * 2 ** (attempt - 1), self.max_backoff_seconds)
        return base * (0.5 + random.random() / 2)  # noqa: S311 - jitter, not a secret


def retry_after_of(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None
