"""The webhook benchmark's raw reference: a plain asyncio client (request bytes written
by hand, the same Standard Webhooks signing, a fresh id each, keep-alive connections,
no database) and what it costs (bench/webhook.py)."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from bench._cpu import CpuGroups
from bench._webhooks import receiver_reset

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the bench team's, and the raw client's


async def raw_client(hosts: list[str], port: int, n: int, conns: int) -> None:
    """N signed POSTs over ``conns`` keep-alive connections spread over ``hosts``."""
    from polling.dispatch.signing import signed_headers

    counter = iter(range(n))

    async def worker(host: str) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        for i in counter:
            job_id = str(uuid.uuid4())
            body = json.dumps({"id": job_id, "payload": {"i": i, "d": 0}, "attempt": 1})
            headers = signed_headers(
                secrets=[SECRET], msg_id=job_id, timestamp=datetime.now(UTC), body=body
            )
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            writer.write(
                f"POST /hook HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n{head}\r\n{body}".encode()
            )
            response = await reader.readuntil(b"\r\n\r\n")
            length = int(response.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
        writer.close()

    await asyncio.gather(*(worker(hosts[i % len(hosts)]) for i in range(conns)))


@dataclass(frozen=True, slots=True)
class Raw:
    """One measure of the raw reference."""

    rate: float  # requests/s
    client_us: float  # the raw client's CPU a request
    receiver_us: float  # the receiver's CPU a request under it


def raw_rate(
    hosts: list[str], port: int, n: int, tag: str, receiver_pids: Callable[[], list[int]]
) -> Raw:
    """The raw client's requests/s and CPU; prints its CPU and the receiver's per request."""
    receiver_reset(port)
    cpu = CpuGroups({"raw_client": lambda: [os.getpid()], "receiver": receiver_pids})
    cpu.start()
    started = time.perf_counter()
    asyncio.run(raw_client(hosts, port, n, 32))
    rate = n / (time.perf_counter() - started)
    seconds = cpu.stop()
    receiver_reset(port)
    for name, spent in seconds.items():
        print(f"raw_cpu_us_per_request[{tag},{name}]: {spent * 1e6 / n:.1f} us")
    return Raw(rate, seconds["raw_client"] * 1e6 / n, seconds["receiver"] * 1e6 / n)
