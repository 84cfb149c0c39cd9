"""Ingest benchmark: schedule N jobs through POST /api/v1/jobs/bulk on gunicorn + PostgreSQL.

Starts everything it needs and stops it again: (re)creates its own database,
migrates it, makes an API key, runs gunicorn on 127.0.0.1, sends the jobs in
bulk requests from a few client threads over keep-alive connections, checks that
every job landed, then stops gunicorn (and drops the database unless --keep).

    .venv/bin/python bench/api_ingest.py                 # 100,000 jobs
    .venv/bin/python bench/api_ingest.py --jobs 20000 --workers 2 --concurrency 2

Prints ``jobs_per_second: <n>``, ``request_p50_ms: <n>`` and ``request_p99_ms: <n>``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000, help="jobs per bulk request")
    parser.add_argument("--concurrency", type=int, default=4, help="client threads")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn worker processes")
    parser.add_argument("--port", type=int, default=8250, help="in 8200-8499")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--database", default="sendlater_bench_api")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    return parser.parse_args()


def recreate_database(pg: str, name: str) -> None:
    with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(pg: str, name: str) -> None:
    with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout


def wait_for_port(port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((HOST, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"gunicorn did not listen on {HOST}:{port} within {timeout_s} s")


def bodies(total: int, batch: int, tag: str = "api_ingest") -> list[bytes]:
    # Due times spread over the next ~28 hours, one per second: many buckets.
    start = datetime.now(UTC) + timedelta(hours=1)
    out = []
    for first in range(0, total, batch):
        jobs = [
            {
                "due_at": (start + timedelta(seconds=n)).isoformat(),
                "handler": "noop",
                "payload": {"n": n, "kind": "bench"},
                "metadata": {"bench": tag},
            }
            for n in range(first, min(first + batch, total))
        ]
        out.append(json.dumps({"jobs": jobs}).encode())
    return out


def send_all(port: int, key: str, work: list[bytes], concurrency: int) -> list[float]:
    todo: queue.Queue[bytes] = queue.Queue()
    for body in work:
        todo.put(body)
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def client() -> None:
        conn = http.client.HTTPConnection(HOST, port, timeout=120)
        try:
            while True:
                try:
                    body = todo.get_nowait()
                except queue.Empty:
                    return
                started = time.perf_counter()
                conn.request("POST", "/api/v1/jobs/bulk", body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                elapsed = time.perf_counter() - started
                with lock:
                    if response.status != 201:
                        failures.append(f"{response.status}: {data[:300]!r}")
                    latencies.append(elapsed)
        finally:
            conn.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed, first: {failures[0]}")
    return latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> int:
    args = parse_args()
    if not 8200 <= args.port <= 8499:
        raise SystemExit("--port must lie in 8200-8499")
    database_url = f"{args.pg}/{args.database}"
    env = dict(
        os.environ,
        DATABASE_URL=database_url,
        SECRET_KEY="bench-only-not-a-secret",
        SENDLATER_ENCRYPTION_KEYS=os.environ.get(
            "SENDLATER_ENCRYPTION_KEYS", "YmVuY2gtb25seS1ub3QtYS1zZWNyZXQteHh4eHh4eHg="
        ),
        DEBUG="false",
        SECURE_SSL_REDIRECT="false",  # plain HTTP on loopback
        ALLOWED_HOSTS=HOST,
        LOG_LEVEL="WARNING",
        SENDLATER_THROTTLE_JOBS="1000000/min",
        SENDLATER_THROTTLE_JOBS_BULK="1000000/min",
        SENDLATER_DB_POOL_MAX="4",
    )
    recreate_database(args.pg, args.database)
    server = None
    try:
        manage(env, "migrate", "--noinput", "-v", "0")
        manage(env, "partitions", "--ensure", "--days", "3")
        key = manage(env, "create_api_key", "--team", "bench").splitlines()[-2].split(": ", 1)[1]
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "sendlater_site.wsgi",
                "--bind",
                f"{HOST}:{args.port}",
                "--workers",
                str(args.workers),
                "--timeout",
                "120",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for_port(args.port)
        work = bodies(args.jobs, args.batch)
        # One warm-up request per worker (imports, pools), not counted.
        send_all(args.port, key, bodies(args.workers * 10, 10, "warm-up"), args.workers)
        started = time.perf_counter()
        latencies = send_all(args.port, key, work, args.concurrency)
        elapsed = time.perf_counter() - started
        with psycopg.connect(database_url) as conn:
            stored = conn.execute(
                "SELECT count(*) FROM scheduling_job WHERE metadata->>'bench' = 'api_ingest'"
            ).fetchone()[0]
        if stored != args.jobs:
            raise RuntimeError(f"{stored} jobs stored, {args.jobs} sent")
        print(f"jobs: {args.jobs}")
        print(f"requests: {len(latencies)} of {args.batch} jobs")
        print(f"gunicorn_workers: {args.workers}")
        print(f"client_threads: {args.concurrency}")
        print(f"seconds: {elapsed:.2f}")
        print(f"jobs_per_second: {args.jobs / elapsed:.0f}")
        print(f"request_p50_ms: {statistics.median(latencies) * 1000:.0f}")
        print(f"request_p99_ms: {percentile(latencies, 0.99) * 1000:.0f}")
        return 0
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        if not args.keep:
            drop_database(args.pg, args.database)


if __name__ == "__main__":
    sys.exit(main())
