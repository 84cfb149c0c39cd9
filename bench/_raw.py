"""Shared pieces of the benchmarks: a scratch database, Django on it, printed figures.

The raw-SQL ones (limits.py, naive.py) are not the service: plain psycopg against
a table of the jobs table's shape, to measure the ceiling and the design the
bucketed key replaces; their flags and claim workers are here too.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import mmh3
import psycopg

ADMIN_URL = os.environ.get("BENCH_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres")


def scratch_database(name: str) -> str:
    """(Re)create database ``name``; return its URL."""
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def drop_database(name: str) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def django_setup(url: str, **env: str) -> None:
    """Set Django up on database ``url`` (the project folder must be on sys.path).

    No connection pool and warnings-only logs; ``env`` adds settings (SENDLATER_*).
    """
    os.environ.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="sendlater_site.settings",
        SECRET_KEY=os.environ.get("SECRET_KEY", "bench-only"),
        SENDLATER_ENCRYPTION_KEYS=os.environ.get(
            "SENDLATER_ENCRYPTION_KEYS", "YmVuY2gtb25seS1ub3QtYS1zZWNyZXQteHh4eHh4eHg="
        ),
        SENDLATER_DB_POOL="false",
        LOG_LEVEL="WARNING",
        **env,
    )
    import django

    django.setup()


def raw_arguments(
    doc: str, *, jobs: int, keep: bool = False, held_snapshot: bool = False
) -> argparse.Namespace:
    """The raw benchmarks' flags: --jobs (default ``jobs``), --shards, --workers, --batch.

    ``keep`` adds --keep (keep the scratch database), ``held_snapshot`` adds
    --held-snapshot. Every count must be positive.
    """
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=jobs)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1000)
    if keep:
        parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    if held_snapshot:
        parser.add_argument(
            "--held-snapshot",
            action="store_true",
            help="hold a REPEATABLE READ snapshot open during each run",
        )
    args = parser.parse_args()
    if min(args.jobs, args.shards, args.workers, args.batch) < 1:
        parser.error("--jobs, --shards, --workers and --batch must be positive")
    return args


def due_rows(n: int, shards: int, bucket: datetime) -> list[tuple]:
    """``n`` rows due inside ``bucket``: (id, bucket, shard, due_at)."""
    rows = []
    for i in range(n):
        job_id = uuid.uuid4()
        due = bucket + timedelta(microseconds=(i * 59_000_000) // max(n, 1))
        rows.append((job_id, bucket, mmh3.hash(str(job_id), signed=False) % shards, due))
    return rows


def past_bucket() -> datetime:
    now = datetime.now(UTC)
    return (now - timedelta(minutes=5)).replace(second=0, microsecond=0)


def copy_rows(url: str, table: str, columns: str, rows: list[tuple]) -> float:
    """COPY ``rows`` into ``table``; return rows per second."""
    t0 = time.perf_counter()
    with (
        psycopg.connect(url) as conn,
        conn.cursor() as cur,
        cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(row)
    return len(rows) / (time.perf_counter() - t0)


def run_workers(target: Callable[..., int], args_per_worker: list[tuple]) -> tuple[int, float]:
    """Run one process per args tuple; return (rows processed, seconds)."""
    ctx = mp.get_context("fork")
    with ctx.Pool(len(args_per_worker)) as pool:
        t0 = time.perf_counter()
        counts = pool.starmap(target, args_per_worker)
        return sum(counts), time.perf_counter() - t0


def say(name: str, value: float, unit: str = "") -> None:
    """Print ``name: value unit``: a count whole, a measure to two places below 100."""
    text = f"{value:,.0f}" if isinstance(value, int) or value >= 100 else f"{value:.2f}"
    print(f"{name}: {text} {unit}".rstrip(), flush=True)
