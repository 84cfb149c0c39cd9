"""The raw PostgreSQL ceiling for this table shape on this machine.

COPY and multi-row INSERT rates into a jobs-shaped table indexed by
``(bucket, shard, due_at)`` for pending rows, then P worker processes owning
disjoint shards claim 1,000-row batches (``FOR UPDATE SKIP LOCKED``) and mark
them done. The service's burst figure (bench/burst.py) is read as a ratio to
``raw_claim_done_rows_per_second``.

    .venv/bin/python bench/limits.py [--jobs 1000000] [--shards 64] [--workers 2]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _raw import (
    copy_rows,
    drop_database,
    due_rows,
    past_bucket,
    raw_arguments,
    run_workers,
    say,
    scratch_database,
)

DB = "sendlater_bench_scale_limits"
SCHEMA = """
CREATE TABLE jobs (
    id uuid PRIMARY KEY, bucket timestamptz NOT NULL, shard int NOT NULL,
    due_at timestamptz NOT NULL, status text NOT NULL DEFAULT 'pending',
    payload jsonb NOT NULL DEFAULT '{}', claim_owner text, claim_epoch bigint,
    claimed_at timestamptz, delivered_at timestamptz, attempts int NOT NULL DEFAULT 0
);
CREATE INDEX jobs_pending ON jobs (bucket, shard, due_at) WHERE status = 'pending';
"""
CLAIM = """
UPDATE jobs SET status = 'claimed', claim_owner = %s, claimed_at = now(), attempts = attempts + 1
WHERE id IN (SELECT id FROM jobs WHERE bucket = %s AND shard = %s AND status = 'pending'
             AND due_at <= now() ORDER BY due_at LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id
"""
DONE = "UPDATE jobs SET status = 'delivered', delivered_at = now() WHERE id = ANY(%s)"


def claim_worker(url: str, shards: list[int], bucket, batch: int, mark_done: bool) -> int:
    total = 0
    with psycopg.connect(url, autocommit=True) as conn:
        for shard in shards:
            while True:
                ids = [r[0] for r in conn.execute(CLAIM, (f"w{shards[0]}", bucket, shard, batch))]
                if not ids:
                    break
                if mark_done:
                    conn.execute(DONE, (ids,))
                total += len(ids)
    return total


def measure_claims(
    url: str, *, shards: int, workers: int, bucket, batch: int, mark_done: bool
) -> float:
    split = [list(range(w, shards, workers)) for w in range(workers)]
    n, seconds = run_workers(claim_worker, [(url, s, bucket, batch, mark_done) for s in split])
    return n / seconds


def reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE jobs SET status = 'pending', claim_owner = NULL, delivered_at = NULL")
        conn.execute("VACUUM ANALYZE jobs")


def main() -> None:
    args = raw_arguments(__doc__, jobs=1_000_000, keep=True)
    url = scratch_database(DB)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(SCHEMA)
        bucket = past_bucket()
        rows = due_rows(args.jobs, args.shards, bucket)
        say(
            "raw_copy_rows_per_second",
            copy_rows(url, "jobs", "id, bucket, shard, due_at", rows),
            "rows/s",
        )
        insert_rows = due_rows(
            min(args.jobs, 100_000), args.shards, bucket.replace(year=bucket.year + 1)
        )
        t0 = time.perf_counter()
        with psycopg.connect(url) as conn, conn.cursor() as cur:
            for i in range(0, len(insert_rows), 1000):
                chunk = insert_rows[i : i + 1000]
                cur.execute(
                    "INSERT INTO jobs (id, bucket, shard, due_at) VALUES "
                    + ",".join(["(%s,%s,%s,%s)"] * len(chunk)),
                    [v for row in chunk for v in row],
                )
        say(
            "raw_insert_1000_rows_per_second",
            len(insert_rows) / (time.perf_counter() - t0),
            "rows/s",
        )
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE jobs")
        common = {
            "shards": args.shards,
            "workers": args.workers,
            "bucket": bucket,
            "batch": args.batch,
        }
        say("raw_claim_rows_per_second", measure_claims(url, mark_done=False, **common), "rows/s")
        reset(url)
        say(
            "raw_claim_done_rows_per_second",
            measure_claims(url, mark_done=True, **common),
            "rows/s",
        )
        print(f"jobs: {args.jobs}\nshards: {args.shards}\nworkers: {args.workers}")
    finally:
        if not args.keep:
            drop_database(DB)


if __name__ == "__main__":
    main()
