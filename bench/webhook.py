"""Webhook benchmark: N jobs delivered by P pollers to a local keep-alive receiver.

Usage (from the repository root, PostgreSQL on 127.0.0.1:5432):

    .venv/bin/python bench/webhook.py                     # N=50000, P=2
    .venv/bin/python bench/webhook.py -n 20000 -p 1,2

Drops and recreates the database ``sendlater_bench_webhook``, starts a minimal
asyncio HTTP/1.1 receiver (keep-alive, answers 200, counts deliveries per
``webhook-id``) in its own process on 127.0.0.1:8650, schedules the jobs due
within one bucket, starts P ``runpoller`` processes (the real webhook sink:
signatures, SSRF-checked connects, per-host cap), waits until every job is
delivered and prints ``name: value unit`` lines. Everything it starts is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok"


def receiver(port: int) -> None:
    """Serve until killed: POST counts a delivery, GET /stats reports the counts."""
    seen: dict[str, int] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                length = int(headers.get("content-length", "0"))
                if length:
                    await reader.readexactly(length)
                if lines[0].startswith("GET /stats"):
                    body = json.dumps({"requests": sum(seen.values()), "unique": len(seen)})
                    raw = body.encode()
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(raw), raw)
                    )
                else:
                    job_id = headers.get("webhook-id", "")
                    seen[job_id] = seen.get(job_id, 0) + 1
                    writer.write(RESPONSE)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def stats(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as response:
        return json.loads(response.read())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=50_000)
    parser.add_argument("-p", "--pollers", default="2", help="comma-separated, e.g. 1,2")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--port", type=int, default=8650)
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--database", default="sendlater_bench_webhook")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    if args.jobs < 1 or args.batch_size < 1 or args.concurrency < 1:
        parser.error("--jobs, --batch-size and --concurrency must be positive")

    import psycopg

    with psycopg.connect(f"{args.server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{args.database}"')
    os.environ.update(
        {
            "DATABASE_URL": f"{args.server}/{args.database}",
            "DJANGO_SETTINGS_MODULE": "sendlater_site.settings",
            "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only"),
            "SENDLATER_CALLBACK_ALLOWLIST": "127.0.0.1",
            "SENDLATER_WEBHOOK_MAX_PER_HOST": str(args.concurrency),
            "SENDLATER_DB_POOL": "false",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
        }
    )
    rx = mp.get_context("spawn").Process(target=receiver, args=(args.port,), daemon=True)
    rx.start()
    children: list[subprocess.Popen[bytes]] = []
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        for pollers in [int(p) for p in args.pollers.split(",")]:
            run(args, pollers, children)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
        rx.kill()
        with psycopg.connect(f"{args.server}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
    return 0


def run(args: argparse.Namespace, pollers: int, children: list[subprocess.Popen[bytes]]) -> None:
    from django.db import connection

    from polling.procs import processes_stop
    from scheduling.clock import db_now
    from scheduling.models import Team
    from scheduling.services import JobSpec, job_schedule_many

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scheduling_job, scheduling_bucket, scheduling_deliveryattempt,"
            " scheduling_taskrun, polling_poller, polling_shardlease, polling_shardcheckpoint"
        )
    before = stats(args.port)
    team, _ = Team.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    first = db_now() + timedelta(seconds=10 + args.jobs / 10_000)
    url = f"http://127.0.0.1:{args.port}/hook"
    for offset in range(0, args.jobs, 5000):
        specs = [
            JobSpec(
                due_at=first + timedelta(seconds=i / args.jobs),
                target_kind="webhook",
                target=url,
                payload={"i": i},
            )
            for i in range(offset, min(args.jobs, offset + 5000))
        ]
        job_schedule_many(team=team, specs=specs)
    started = []
    for i in range(pollers):
        cmd = [
            sys.executable,
            str(ROOT / "manage.py"),
            "runpoller",
            "--name",
            f"wh-{i}",
            "--batch-size",
            str(args.batch_size),
            "--concurrency",
            str(args.concurrency),
            "--poll-interval",
            "0.2",
        ]
        started.append(subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ)))
    children.extend(started)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM scheduling_job WHERE status = 'delivered'")
            if cursor.fetchone()[0] >= args.jobs:
                break
        time.sleep(0.5)
    processes_stop(started, grace_seconds=30)
    after = stats(args.port)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*) FILTER (WHERE status = 'delivered'),
                   EXTRACT(EPOCH FROM max(delivered_at) - min(due_at)),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY delivered_at - due_at),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY delivered_at - due_at),
                   count(*) FILTER (WHERE delivered_at < due_at)
            FROM scheduling_job
            """
        )
        delivered, span, p50, p99, early = cursor.fetchone()
        cursor.execute(
            "SELECT count(*), min(error) FROM scheduling_deliveryattempt"
            " WHERE result <> 'delivered'"
        )
        failed_attempts, sample_error = cursor.fetchone()
    tag = f"[P={pollers}]"
    requests = after["requests"] - before["requests"]
    print(f"jobs{tag}: {args.jobs} count")
    print(f"delivered_per_second{tag}: {delivered / float(span or 1):.0f} jobs/s")
    print(f"lag_p50_seconds{tag}: {p50.total_seconds() if p50 else 0:.3f} s")
    print(f"lag_p99_seconds{tag}: {p99.total_seconds() if p99 else 0:.3f} s")
    print(f"lost{tag}: {args.jobs - delivered} jobs")
    print(f"http_requests{tag}: {requests} count")
    print(f"duplicates{tag}: {requests - delivered} deliveries")
    print(f"early{tag}: {early} jobs")
    print(f"failed_attempts{tag}: {failed_attempts} count")
    if sample_error:
        print(f"# a failed attempt said: {sample_error}")


if __name__ == "__main__":
    sys.exit(main())
