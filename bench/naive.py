"""The design the bucketed key replaces: one table, one ``due_at`` index, shared by all.

The same burst (N jobs due within one minute) is claimed by P workers in
1,000-row batches with ``FOR UPDATE SKIP LOCKED`` and marked done, first from a
single ``due_at`` index that every worker reads at its hot end, then from the
bucketed ``(bucket, shard, due_at)`` layout with workers owning disjoint shards.
Both figures print side by side, measured in the same run. ``--held-snapshot``
keeps a REPEATABLE READ transaction open during each run (a long report, a
backup, a standby's feedback): the claimed rows' index entries then stay, and
every claim walks past those of the rows claimed before it in its index range.

    .venv/bin/python bench/naive.py [--jobs 200000] [--workers 2] [--held-snapshot]
"""

from __future__ import annotations

import sys
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
from limits import SCHEMA as BUCKETED_SCHEMA
from limits import measure_claims

DB = "sendlater_bench_scale_naive"
NAIVE_SCHEMA = """
CREATE TABLE naive_jobs (
    id uuid PRIMARY KEY, due_at timestamptz NOT NULL, status text NOT NULL DEFAULT 'pending',
    payload jsonb NOT NULL DEFAULT '{}', claim_owner text, claimed_at timestamptz,
    delivered_at timestamptz, attempts int NOT NULL DEFAULT 0
);
CREATE INDEX naive_due ON naive_jobs (due_at) WHERE status = 'pending';
"""
CLAIM = """
UPDATE naive_jobs SET status = 'claimed', claim_owner = %s, claimed_at = now(),
    attempts = attempts + 1
WHERE id IN (SELECT id FROM naive_jobs WHERE status = 'pending' AND due_at <= now()
             ORDER BY due_at LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id
"""
DONE = "UPDATE naive_jobs SET status = 'delivered', delivered_at = now() WHERE id = ANY(%s)"


def naive_worker(url: str, name: str, batch: int) -> int:
    total = 0
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            ids = [r[0] for r in conn.execute(CLAIM, (name, batch))]
            if not ids:
                return total
            conn.execute(DONE, (ids,))
            total += len(ids)


def main() -> None:
    args = raw_arguments(__doc__, jobs=200_000, held_snapshot=True)
    url = scratch_database(DB)
    holder = None
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(NAIVE_SCHEMA)
            conn.execute(BUCKETED_SCHEMA)
        bucket = past_bucket()
        rows = due_rows(args.jobs, args.shards, bucket)
        copy_rows(url, "naive_jobs", "id, due_at", [(r[0], r[3]) for r in rows])
        copy_rows(url, "jobs", "id, bucket, shard, due_at", rows)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        if args.held_snapshot:
            holder = hold_snapshot(url)
        n, seconds = run_workers(
            naive_worker, [(url, f"w{w}", args.batch) for w in range(args.workers)]
        )
        assert n == args.jobs, f"naive workers claimed {n} of {args.jobs}"
        naive = n / seconds
        if holder is not None:
            holder.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")  # the naive run's dead rows must not slow the next
        if args.held_snapshot:
            holder = hold_snapshot(url)
        bucketed = measure_claims(
            url,
            shards=args.shards,
            workers=args.workers,
            bucket=bucket,
            batch=args.batch,
            mark_done=True,
        )
        say("naive_due_index_claim_done_rows_per_second", naive, "rows/s")
        say("bucketed_claim_done_rows_per_second", bucketed, "rows/s")
        print(f"bucketed_over_naive: {bucketed / naive:.2f}x")
        print(f"jobs: {args.jobs}\nworkers: {args.workers}")
        print(f"held_snapshot: {'yes' if args.held_snapshot else 'no'}")
    finally:
        if holder is not None:
            holder.close()
        drop_database(DB)


def hold_snapshot(url: str) -> psycopg.Connection:
    """An open REPEATABLE READ transaction that has taken its snapshot, as a long
    report, a backup or a standby's feedback holds one: until it ends, the rows the
    claims update stay visible to it, so their index entries cannot be removed."""
    conn = psycopg.connect(url)
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    conn.execute("SELECT count(*) FROM jobs")
    return conn


if __name__ == "__main__":
    main()
