"""Shared pieces of the raw-SQL benchmarks: a scratch database and claim workers.

Not the service: plain psycopg against a table of the jobs table's shape, to
measure the ceiling (limits.py) and the design the bucketed key replaces (naive.py).
"""

from __future__ import annotations

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
    print(
        f"{name}: {value:,.0f} {unit}".rstrip()
        if value >= 100
        else f"{name}: {value:.2f} {unit}".rstrip(),
        flush=True,
    )
