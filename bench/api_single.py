"""Single-call API benchmark: GET /healthz, GET /api/v1/jobs/{id}, POST /api/v1/jobs.

Against gunicorn with the repository's ``gunicorn.conf.py`` on PostgreSQL: (re)creates
its own database, migrates it, makes an API key, starts gunicorn on 127.0.0.1 with
the throttle budget raised out of the way, then for each client count (32 and 128
keep-alive connections, a plain asyncio HTTP/1.1 client) sends each kind of request
for ``--seconds`` in all, the kinds taking turns in ``--rounds`` slices, and prints
req/s, p50 and p99, each rate's ratio to ``/healthz`` at the same client count (the
stack: gunicorn + Django's middleware, no database), and the CPU per request of
gunicorn's workers and of the database's backends (read from /proc). Stops
gunicorn and drops the database at the end.

A fourth kind, ``floor`` (``POST /bench/floor``, served by ``bench/_floorwsgi.py``,
which gunicorn runs in front of the service), is the create's database round trip
behind the bare stack: the same two statements, none of the create's Python.
``create_to_floor`` is the create's rate as a share of it.

    .venv/bin/python bench/api_single.py
    .venv/bin/python bench/api_single.py --seconds 5 --clients 32

Set ``--throttle-store cache --cache-url redis://127.0.0.1:6379/3`` to count the
budget in Redis instead of the database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._floorwsgi import FLOOR_PATH  # noqa: E402
from bench.api_ingest import drop_database, manage, recreate_database, wait_for_port  # noqa: E402

HOST = "127.0.0.1"
# The service behind gunicorn, plus the floor's URL (see the docstring).
FLOOR_APP = "bench._floorwsgi:application"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per request kind")
    parser.add_argument("--clients", default="32,128", help="comma-separated")
    parser.add_argument(
        "--rounds", type=int, default=5, help="slices per kind, taking turns (default 5)"
    )
    parser.add_argument("--port", type=int, default=8260)
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--database", default="sendlater_bench_api_single")
    parser.add_argument("--throttle-store", choices=["database", "cache"], default="database")
    parser.add_argument("--cache-url", default="")
    args = parser.parse_args()
    if args.seconds <= 0 or args.rounds < 1:
        parser.error("--seconds must be positive, --rounds at least 1")
    return args


def request_bytes(method: str, path: str, key: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nhost: {HOST}\r\nauthorization: Bearer {key}\r\n"
    if body:
        head += f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


async def load(
    port: int, make: object, clients: int, seconds: float
) -> tuple[int, list[float], int]:
    """Send requests from ``clients`` connections for ``seconds``; (non-2xx, latencies,
    reconnects). A connection the server closes (a worker recycled after
    ``max_requests``) is opened again and its request sent again, as a client would."""
    latencies: list[float] = []
    failures = 0
    reconnects = 0
    stop = time.perf_counter() + seconds

    async def client() -> None:
        nonlocal failures, reconnects
        reader, writer = await asyncio.open_connection(HOST, port)
        while time.perf_counter() < stop:
            started = time.perf_counter()
            try:
                writer.write(make())  # type: ignore[operator]
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()
                reconnects += 1
                reader, writer = await _connect_again(port)
                continue
            latencies.append(time.perf_counter() - started)
            if not head.startswith(b"HTTP/1.1 2"):
                failures += 1
        writer.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return failures, latencies, reconnects


async def _connect_again(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A new connection after the server closed one; a connect that is itself refused
    or reset (a server restarting its workers) is tried again, as a client would."""
    for _ in range(50):
        try:
            return await asyncio.open_connection(HOST, port)
        except ConnectionError:
            await asyncio.sleep(0.02)
    return await asyncio.open_connection(HOST, port)


def workers_cpu_seconds(master: int) -> tuple[frozenset[str], float]:
    """gunicorn's workers (children of ``master``) and their user + system CPU so far."""
    try:
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    except OSError:
        return frozenset(), 0.0
    return frozenset(children), cpu_seconds(children)


def backends_cpu_seconds(pg: str, database: str) -> tuple[frozenset[int], float]:
    """The PostgreSQL backends serving ``database`` and their user + system CPU so far
    (same machine only; 0 if they cannot be read)."""
    with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", [database]
        ).fetchall()
    return frozenset(pid for (pid,) in rows), cpu_seconds([str(pid) for (pid,) in rows])


def cpu_seconds(pids: list[str]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a worker that just exited (recycled)
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


class Totals:
    """One request kind's figures, summed over its slices."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.failures = self.reconnects = 0
        self.cpu = self.db_cpu = 0.0
        self.cpu_known = self.db_cpu_known = True

    def measure(
        self, master: int, args: argparse.Namespace, make: object, clients: int, seconds: float
    ) -> None:
        workers, cpu = workers_cpu_seconds(master)
        backends, db_cpu = backends_cpu_seconds(args.pg, args.database)
        failures, latencies, reconnects = asyncio.run(load(args.port, make, clients, seconds))
        workers_after, cpu_after = workers_cpu_seconds(master)
        # A worker recycled meanwhile (max_requests) takes its CPU along.
        self.cpu_known &= workers_after == workers
        self.cpu += cpu_after - cpu
        backends_after, db_cpu_after = backends_cpu_seconds(args.pg, args.database)
        self.db_cpu_known &= backends_after == backends  # the pools kept their connections
        self.db_cpu += db_cpu_after - db_cpu
        self.latencies += latencies
        self.failures += failures
        self.reconnects += reconnects

    def report(self, tag: str, seconds: float, base: float) -> None:
        n = len(self.latencies)
        rate = n / seconds
        print(f"requests_per_second{tag}: {rate:.0f} req/s")
        print(f"p50_ms{tag}: {percentile(self.latencies, 0.5) * 1000:.1f} ms")
        print(f"p99_ms{tag}: {percentile(self.latencies, 0.99) * 1000:.1f} ms")
        print(f"ratio_to_healthz{tag}: {rate / base:.2f}")
        if n and self.cpu_known:
            print(f"worker_cpu_ms_per_request{tag}: {self.cpu / n * 1000:.2f} ms")
        if n and self.db_cpu_known:
            print(f"db_cpu_ms_per_request{tag}: {self.db_cpu / n * 1000:.2f} ms")
        if self.failures:
            print(f"non_2xx{tag}: {self.failures} responses")
        if self.reconnects:
            print(f"reconnects{tag}: {self.reconnects}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def main() -> int:
    args = parse_args()
    database_url = f"{args.pg}/{args.database}"
    env = dict(
        os.environ,
        DATABASE_URL=database_url,
        SECRET_KEY="bench-only-not-a-secret",
        SENDLATER_ENCRYPTION_KEYS=os.environ.get(
            "SENDLATER_ENCRYPTION_KEYS", "YmVuY2gtb25seS1ub3QtYS1zZWNyZXQteHh4eHh4eHg="
        ),
        DEBUG="false",
        SECURE_SSL_REDIRECT="false",
        ALLOWED_HOSTS=HOST,
        LOG_LEVEL="WARNING",
        GUNICORN_BIND=f"{HOST}:{args.port}",
        GUNICORN_ACCESS_LOG="/dev/null",
        GUNICORN_LOG_LEVEL="warning",
        SENDLATER_THROTTLE_JOBS="100000000/min",
        SENDLATER_THROTTLE_STORE=args.throttle_store,
    )
    if args.cache_url:
        env["CACHE_URL"] = args.cache_url
    recreate_database(args.pg, args.database)
    server = None
    # gunicorn's log goes to a file: a pipe read only at the end would fill up with
    # error lines and block the workers that write them (the run would hang). Closed
    # (and so removed) by _report_errors.
    log = tempfile.NamedTemporaryFile("w+", prefix="api-single-gunicorn-")  # noqa: SIM115
    try:
        manage(env, "migrate", "--noinput", "-v", "0")
        manage(env, "partitions", "--ensure", "--days", "3")
        key = manage(env, "create_api_key", "--team", "bench").splitlines()[-2].split(": ", 1)[1]
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", FLOOR_APP],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        wait_for_port(args.port)
        due = (datetime.now(UTC) + timedelta(days=1)).isoformat()
        body = json.dumps({"due_at": due, "handler": "noop", "payload": {"n": 1}}).encode()
        create = request_bytes("POST", "/api/v1/jobs", key, body)
        created = asyncio.run(_one(args.port, create))
        job_id = json.loads(created)["id"]
        kinds = {
            "healthz": request_bytes("GET", "/healthz", key),
            "read": request_bytes("GET", f"/api/v1/jobs/{job_id}", key),
            "create": create,
            "floor": request_bytes("POST", FLOOR_PATH, key, body),
        }
        # Warm every worker (imports, connections, the key cache) before measuring.
        for raw in kinds.values():
            asyncio.run(load(args.port, lambda raw=raw: raw, 16, 1.0))
        print(f"throttle_store: {args.throttle_store}")
        for clients in [int(c) for c in args.clients.split(",")]:
            totals = {name: Totals() for name in kinds}
            # Kinds take turns in short slices, so a burst of foreign load on a shared
            # machine falls on all of them alike rather than on one kind's figures.
            for _ in range(args.rounds):
                for name, raw in kinds.items():
                    totals[name].measure(
                        server.pid, args, lambda raw=raw: raw, clients, args.seconds / args.rounds
                    )
            base = len(totals["healthz"].latencies) / args.seconds
            for name, total in totals.items():
                total.report(f"[{name},c={clients}]", args.seconds, base)
            created, floor = len(totals["create"].latencies), len(totals["floor"].latencies)
            if floor:
                print(f"create_to_floor[c={clients}]: {created / floor:.2f}")
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        drop_database(args.pg, args.database)
        _report_errors(log)
    return 0


def _report_errors(log: Any) -> None:
    """Print how many tracebacks gunicorn logged, and the last one (none is the rule)."""
    log.seek(0)
    text = log.read()
    log.close()
    errors = text.count("Traceback (most recent call last)")
    if errors:
        print(f"gunicorn_tracebacks: {errors}")
        print(text[text.rindex("Traceback (most recent call last)") :][-3000:], file=sys.stderr)


async def _one(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(raw)
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line[15:]) for line in head.split(b"\r\n") if line[:15].lower() == b"content-length:"
    )
    body = await reader.readexactly(length)
    writer.close()
    if not head.startswith(b"HTTP/1.1 201"):
        raise RuntimeError(f"could not create a job: {head!r} {body!r}")
    return body


if __name__ == "__main__":
    sys.exit(main())
