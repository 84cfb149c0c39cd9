"""The webhook benchmark's receiver (its own process): a minimal asyncio HTTP/1.1 server
on 127.0.0.1 and on eight more loopback addresses (eight "customers"), the last of them
slow on demand; it records each ``webhook-id``'s first arrival and lag (bench/webhook.py)."""

from __future__ import annotations

import asyncio
import json
import time

from bench._webhooks import receivers_serve

RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok"
FAST_HOSTS = [f"127.0.0.{i}" for i in range(2, 9)]
SLOW_HOST = "127.0.0.9"


def receiver(port: int, slow_seconds: float) -> None:
    """Serve until killed. POST: record a delivery; GET /stats: report; GET /reset."""
    first: dict[str, float] = {}  # webhook-id -> first arrival (unix time)
    lags: dict[str, list[float]] = {}  # "fast" / "slow" -> lag of each first arrival
    last: dict[str, float] = {}  # "fast" / "slow" -> its latest first arrival (unix time)
    counts = {"requests": 0, "early": 0}

    def stats() -> bytes:
        def pct(values: list[float], q: float) -> float:
            return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0

        report = {"requests": counts["requests"], "unique": len(first), "early": counts["early"]}
        report["first_at"] = min(first.values(), default=0.0)
        report["last_at"] = max(first.values(), default=0.0)
        for group, values in lags.items():
            values.sort()
            report[group] = {
                "n": len(values),
                "p50": pct(values, 0.5),
                "p99": pct(values, 0.99),
                "max": values[-1] if values else 0.0,
                "last_at": last.get(group, 0.0),
            }
        return json.dumps(report).encode()

    async def answer(line: str, headers: dict[str, str], body: bytes, local: str) -> bytes:
        if line.startswith("GET /reset"):
            first.clear(), lags.clear(), last.clear(), counts.update(requests=0, early=0)
            return RESPONSE
        now = time.time()
        counts["requests"] += 1
        job_id = headers.get("webhook-id", "")
        if job_id not in first:
            first[job_id] = now
            data = json.loads(body)  # the envelope, or the payload alone
            due = data.get("payload", data).get("d", now)
            group = "slow" if local == SLOW_HOST else "fast"
            lags.setdefault(group, []).append(now - due)
            last[group] = now
            counts["early"] += now < due
        if local == SLOW_HOST and slow_seconds > 0:
            await asyncio.sleep(slow_seconds)
        return RESPONSE

    receivers_serve(answer, stats, ["127.0.0.1", *FAST_HOSTS, SLOW_HOST], port)
