"""What the webhook benchmarks share: a scratch database with the service migrated,
a receiver process, the poller processes they start, and the clean-up."""

from __future__ import annotations

import asyncio
import atexit
import io
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


async def request_read(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    """One HTTP/1.1 request from a keep-alive connection: its request line, its headers
    (names lower-cased) and its body (by content-length). The receivers' parser."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {
        k.strip().lower(): v.strip()
        for k, _, v in (line.partition(":") for line in lines[1:] if line)
    }
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return lines[0], headers, body


def stats_reply(raw: bytes) -> bytes:
    """A receiver's answer to ``GET /stats``: ``raw`` (JSON) as a 200 response."""
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(raw), raw)


# A receiver's answer to one request other than ``GET /stats``: given its request line,
# headers, body and the local address it came to, the response to write.
Answer = Callable[[str, dict[str, str], bytes, str], Awaitable[bytes]]


def receivers_serve(
    answer: Answer, stats: Callable[[], bytes], hosts: list[str], port: int
) -> None:
    """Serve HTTP/1.1 keep-alive on ``port`` of each of ``hosts`` until killed: ``GET
    /stats`` is answered with ``stats()`` (JSON), every other request by ``answer``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        local = writer.get_extra_info("sockname")[0]
        try:
            while True:
                line, headers, body = await request_read(reader)
                if line.startswith("GET /stats"):
                    writer.write(stats_reply(stats()))
                else:
                    writer.write(await answer(line, headers, body, local))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the client closed its keep-alive connection: the finally closes ours
        finally:
            writer.close()

    async def main() -> None:
        servers = [await asyncio.start_server(handle, host, port, backlog=2048) for host in hosts]
        await asyncio.gather(*(server.serve_forever() for server in servers))

    asyncio.run(main())


def receiver_stats(port: int) -> dict:
    """What the receiver on ``port`` reports (``GET /stats``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=30) as response:
        return json.loads(response.read())


def receiver_reset(port: int) -> None:
    """Have the receiver on ``port`` forget what it recorded (``GET /reset``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/reset", timeout=30) as response:
        response.read()


def pollers_stop(children: list[subprocess.Popen[bytes]]) -> None:
    """Stop the poller processes in ``children`` (SIGTERM, then the grace) and forget them."""
    from polling.common.processes import processes_stop

    processes_stop(children, grace_seconds=30)
    children.clear()


def database_fresh(server: str, database: str) -> Callable[[], None]:
    """(Re)create ``database`` on ``server`` and point Django's settings at it (loopback
    callbacks allowed, no pool, partitions two days ahead); return what drops it."""
    import psycopg

    def drop() -> None:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    drop()
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    os.environ.update(
        {
            "DATABASE_URL": f"{server}/{database}",
            "DJANGO_SETTINGS_MODULE": "sendlater_site.settings",
            "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only"),
            "SENDLATER_ENCRYPTION_KEYS": os.environ.get(
                "SENDLATER_ENCRYPTION_KEYS", "YmVuY2gtb25seS1ub3QtYS1zZWNyZXQteHh4eHh4eHg="
            ),
            "SENDLATER_CALLBACK_ALLOWLIST": "127.0.0.0/8",
            "SENDLATER_DB_POOL": "false",
            "SENDLATER_PARTITION_AHEAD_DAYS": "2",
            "LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
            "PYTHONPATH": str(ROOT),
        }
    )
    return drop


@contextmanager
def webhook_bench(
    *,
    server: str,
    database: str,
    receiver: Callable[..., None],
    receiver_args: tuple[object, ...],
    children: list[subprocess.Popen[bytes]],
) -> Iterator[None]:
    """(Re)create ``database`` on ``server``, point Django at it (loopback callbacks
    allowed), start ``receiver(*receiver_args)`` in its own process, migrate; on exit
    stop the pollers in ``children`` and the receiver, and drop the database."""
    # A SIGTERM (a stopped run) unwinds through the cleanup below, as Ctrl-C does:
    # its default would leave the receiver and the pollers running, on the port.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    drop = database_fresh(server, database)
    rx = mp.get_context("spawn").Process(target=receiver, args=receiver_args, daemon=True)
    rx.start()
    atexit.register(pollers_stop, children)
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        call_command("partitions", "--ensure", "--days", "2", verbosity=0, stdout=io.StringIO())
        yield
    finally:
        pollers_stop(children)
        rx.kill()
        from django.db import connections

        connections.close_all()
        drop()


def pollers_metrics(ports: list[int]) -> dict[str, float]:
    """What the benchmark reads off the pollers' ``/metrics``, summed over them:
    ``deferred`` (deferred outcomes written back, ``sendlater_deliveries_total``),
    ``claims`` / ``claimed`` (claim statements and the jobs they took) and
    ``groups`` / ``grouped`` (write-back statements and the outcomes they wrote)."""
    wanted = {
        'sendlater_deliveries_total{result="deferred"}': "deferred",
        "sendlater_claim_batch_size_count": "claims",
        "sendlater_claim_batch_size_sum": "claimed",
        "sendlater_writeback_group_size_count": "groups",
        "sendlater_writeback_group_size_sum": "grouped",
    }
    totals = dict.fromkeys(wanted.values(), 0.0)
    for port in ports:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as rsp:
                text = rsp.read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            if name in wanted:
                totals[wanted[name]] += float(value)
    return totals
