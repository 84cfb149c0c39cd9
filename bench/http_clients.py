"""Which HTTP machinery delivers webhooks fastest here: requests/s and client CPU per request.

Usage (from the repository root; no database):

    .venv/bin/python bench/http_clients.py            # N=20000 each, 32 connections
    .venv/bin/python bench/http_clients.py -n 50000 -c 64

Starts the receiver of ``bench/webhook.py`` in its own process and sends N signed
POSTs (JSON body, Standard Webhooks HMAC, a fresh id each) with each client over
C keep-alive connections: a plain asyncio client (the raw reference: request bytes
written by hand, no library), aiohttp, libcurl's multi interface (pycurl, what the
webhook transport uses), httpcore's async pool (anyio) and httpcore's sync pool on
C threads (the sink before the pipelined engine). Prints, per client,
``requests_per_second``, ``cpu_us_per_request`` (this process's CPU time, user +
system, over N) and the ratio to the raw reference.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.webhook import receiver  # noqa: E402  (args: port, slow_seconds)
from polling.dispatch.signing import signed_headers  # noqa: E402

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def request_parts(i: int) -> tuple[bytes, dict[str, str]]:
    body = orjson.dumps({"id": str(uuid.uuid4()), "payload": {"i": i}, "attempt": 1})
    headers = {
        "content-type": "application/json",
        "user-agent": "sendlater-bench/1",
        **signed_headers(
            secrets=[SECRET], msg_id=str(uuid.uuid4()), timestamp=datetime.now(UTC), body=body
        ),
    }
    return body, headers


async def _raw(url_host: str, port: int, n: int, conns: int) -> None:
    counter = iter(range(n))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(url_host, port)
        for i in counter:
            body, headers = request_parts(i)
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            writer.write(
                f"POST /hook HTTP/1.1\r\nhost: {url_host}\r\ncontent-length: {len(body)}\r\n"
                f"{head}\r\n".encode("latin-1")
                + body
            )
            response = await reader.readuntil(b"\r\n\r\n")
            length = int(response.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
        writer.close()

    await asyncio.gather(*(worker() for _ in range(conns)))


async def _aiohttp(url: str, n: int, conns: int) -> None:
    import aiohttp

    counter = iter(range(n))
    connector = aiohttp.TCPConnector(limit=conns)
    async with aiohttp.ClientSession(
        connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar()
    ) as session:

        async def worker() -> None:
            for i in counter:
                body, headers = request_parts(i)
                async with session.post(
                    url, data=body, headers=headers, allow_redirects=False
                ) as response:
                    await response.content.read(64 * 1024)

        await asyncio.gather(*(worker() for _ in range(conns)))


async def _httpcore_async(url: str, n: int, conns: int) -> None:
    import httpcore

    counter = iter(range(n))
    async with httpcore.AsyncConnectionPool(max_connections=conns) as pool:

        async def worker() -> None:
            for i in counter:
                body, headers = request_parts(i)
                async with pool.stream(
                    "POST", url, headers=list(headers.items()), content=body
                ) as response:
                    async for _chunk in response.aiter_stream():
                        pass

        await asyncio.gather(*(worker() for _ in range(conns)))


def _pycurl(url: str, n: int, conns: int) -> None:
    import pycurl

    multi = pycurl.CurlMulti()
    multi.setopt(pycurl.M_MAX_HOST_CONNECTIONS, conns)
    idle = [pycurl.Curl() for _ in range(conns)]
    counter = iter(range(n))
    running = 0

    def start(handle: pycurl.Curl, i: int) -> None:
        body, headers = request_parts(i)
        handle.setopt(pycurl.URL, url)
        handle.setopt(pycurl.POSTFIELDS, body)
        handle.setopt(pycurl.HTTPHEADER, [f"{k}: {v}" for k, v in headers.items()])
        handle.setopt(pycurl.WRITEFUNCTION, lambda chunk: None)
        multi.add_handle(handle)

    for handle in list(idle):
        i = next(counter, None)
        if i is None:
            break
        idle.remove(handle)
        start(handle, i)
        running += 1
    while running:
        while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
            pass
        while True:
            queued, ok, failed = multi.info_read()
            for handle in ok + [f[0] for f in failed]:
                handle.getinfo(pycurl.RESPONSE_CODE)
                multi.remove_handle(handle)
                running -= 1
                i = next(counter, None)
                if i is not None:
                    start(handle, i)
                    running += 1
            if not queued:
                break
        if running:
            multi.select(1.0)


def _httpcore_threads(url: str, n: int, conns: int) -> None:
    import httpcore

    pool = httpcore.ConnectionPool(max_connections=conns)

    def one(i: int) -> None:
        body, headers = request_parts(i)
        with pool.stream("POST", url, headers=list(headers.items()), content=body) as response:
            for _chunk in response.iter_stream():
                pass

    with ThreadPoolExecutor(conns) as executor:
        list(executor.map(one, range(n), chunksize=64))
    pool.close()


def measure(run: Callable[[], None], n: int) -> tuple[float, float]:
    cpu0, t0 = time.process_time(), time.perf_counter()
    run()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    return n / wall, cpu / n * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--requests", type=int, default=20_000)
    parser.add_argument("-c", "--connections", type=int, default=32)
    parser.add_argument("--port", type=int, default=8651)
    args = parser.parse_args()
    if args.requests < 1 or args.connections < 1:
        parser.error("--requests and --connections must be positive")
    rx = mp.get_context("spawn").Process(target=receiver, args=(args.port, 0.0), daemon=True)
    rx.start()
    time.sleep(1.0)
    url = f"http://127.0.0.1:{args.port}/hook"
    n, c = args.requests, args.connections
    clients: dict[str, Callable[[], None]] = {
        "raw_asyncio": lambda: asyncio.run(_raw("127.0.0.1", args.port, n, c)),
        "aiohttp": lambda: asyncio.run(_aiohttp(url, n, c)),
        "pycurl_multi": lambda: _pycurl(url, n, c),
        "httpcore_async": lambda: asyncio.run(_httpcore_async(url, n, c)),
        "httpcore_threads": lambda: _httpcore_threads(url, n, c),
    }
    try:
        raw_rate = None
        for name, run in clients.items():
            rate, cpu = measure(run, n)
            raw_rate = raw_rate or rate
            print(f"requests_per_second[{name}]: {rate:.0f} req/s")
            print(f"cpu_us_per_request[{name}]: {cpu:.1f} us")
            print(f"ratio_to_raw[{name}]: {rate / raw_rate:.2f}")
    finally:
        rx.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
