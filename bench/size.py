"""Size benchmark: the poller's claim rate must not grow with the stored future.

On the service's own schema (migrated, partitioned, one partition per day) in the
scratch database ``sendlater_bench_scale_size``:

1. claim rate: D jobs due in one past bucket are claimed and written back as
   delivered with the service's statements (``polling.reading.take.batch_take`` +
   ``write_back``, 1,000-row batches, 64 shards, one process), first with 100,000
   future jobs stored over the next 30 days, then with F (default 10,000,000);
   rows are generated server-side (``INSERT ... SELECT generate_series``), the
   fastest way to fill the table here, then vacuumed and analysed;
2. catch-up: every shard's checkpoint is set 7 days back, with every minute of
   those 7 days recorded as a bucket (written once, now empty), and one poller
   iteration (``Poller.iterate``: leases, frontier walk, checkpoint advance) is
   timed until all checkpoints reach the last closed bucket.

    .venv/bin/python bench/size.py [--due 100000] [--future 10000000]

The database is dropped at the end (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _raw import django_setup, drop_database, say, scratch_database  # noqa: E402

DB = "sendlater_bench_scale_size"
SHARDS = 64
FILL_SQL = """
INSERT INTO scheduling_job (id, team_id, due_at, bucket, shard, status, target_kind, target,
    payload, metadata, request_fingerprint, window_seconds, attempts, last_error,
    created_at, updated_at)
SELECT gen_random_uuid(), %(team)s, b + (g %% 60) * interval '1 second', b, g %% {shards},
    'pending', 'handler', 'noop', jsonb_build_object('i', g), '{{}}', '', 0, 0, '', now(), now()
FROM (SELECT g, %(first)s::timestamptz
             + (g %% %(buckets)s) * interval '1 minute' AS b
      FROM generate_series(1, %(n)s) g) s
"""


def fill(team: int, first, buckets: int, n: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            FILL_SQL.format(shards=SHARDS),
            {"team": team, "first": first, "buckets": buckets, "n": n},
        )
        # Vacuumed and analysed, as a stored future long since written would be:
        # otherwise autovacuum works through the fresh rows while the claim rate
        # is measured (in both phases alike).
        cursor.execute("VACUUM (ANALYZE) scheduling_job")


def settle() -> None:
    """Start a measurement from the same state in every phase: a fresh checkpoint.

    Without it the checkpoint that the fill's WAL forces lands inside the 10M
    phase's measurement (its buffer writes and the full-page images every first
    touch of a page then costs), not inside the 100k one's: that is the fill's
    cost, not the stored future's.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")


def claim_rate(bucket, now, batch: int) -> float:
    from django.db import transaction

    from polling.ownership import leases
    from polling.reading import take
    from polling.writing import writeback
    from polling.writing.writeback import Result

    epochs = leases.lease_acquire(
        owner="bench", shards=range(SHARDS), now=now, until=now + timedelta(hours=1)
    )
    done = 0
    t0 = time.perf_counter()
    for shard in range(SHARDS):
        while True:
            got = take.batch_take(
                owner="bench", epoch=epochs[shard], bucket=bucket, shard=shard, now=now, limit=batch
            )
            if not got:
                break
            results = [
                Result(j.id, "delivered", j.due_at, j.bucket, j.shard, epoch=j.epoch, attempt=1)
                for j in got
            ]
            with transaction.atomic():
                done += len(writeback.write_back(owner="bench", results=results, now=now))
                writeback.inflight_forget({j.batch for j in got})
    seconds = time.perf_counter() - t0
    leases.lease_release(owner="bench", shards=range(SHARDS))
    return done / seconds


def catch_up(now) -> float:
    from django.db import connection

    from polling.engine.poller import Poller
    from polling.models import ShardCheckpoint
    from scheduling import keys
    from scheduling.models import Bucket

    start = keys.bucket_of(now - timedelta(days=7), 60)
    minutes = 7 * 24 * 60
    Bucket.objects.bulk_create(
        [Bucket(start=start + timedelta(minutes=i), shard_count=SHARDS) for i in range(minutes)],
        ignore_conflicts=True,
        batch_size=2000,
    )
    ShardCheckpoint.objects.update(last_drained=start)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE polling_shardlease SET owner = NULL, expires_at = NULL")
        cursor.execute("ANALYZE")

    class Idle:
        def deliver(self, jobs):  # type: ignore[no-untyped-def]
            return []

        def close(self) -> None:
            pass

    poller = Poller(name="catchup", sink=Idle(), batch_size=1000, poll_interval=1, sweep_every=1e9)
    poller.start()
    t0 = time.perf_counter()
    poller.iterate()
    seconds = time.perf_counter() - t0
    last_closed = keys.bucket_of(now, 60) - timedelta(minutes=2)
    behind = ShardCheckpoint.objects.filter(last_drained__lt=last_closed).count()
    say("catchup_shards_behind_after_one_iteration", behind, "shards")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--due", type=int, default=100_000)
    parser.add_argument("--future", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="claim runs per phase (median)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if min(args.due, args.future, args.batch, args.repeat) < 1:
        parser.error("--due, --future, --batch and --repeat must be positive")
    django_setup(
        scratch_database(DB),
        SENDLATER_DEFAULT_SHARDS=str(SHARDS),
        SENDLATER_PARTITION_CHECK_SECONDS="0",  # partitions are made below
        SENDLATER_PRUNE_SECONDS="0",
    )
    from django.core.management import call_command
    from django.db import connections

    from polling.ownership.registration import shard_rows_ensure
    from scheduling import keys
    from scheduling.models import Team
    from scheduling.sharding.clock import db_now
    from scheduling.storage.partitions import partitions_ensure

    try:
        call_command("migrate", verbosity=0)
        now = db_now()
        partitions_ensure(now=now, days=31)
        shard_rows_ensure(shard_count=SHARDS)
        team = Team.objects.create(slug="bench", name="Bench").pk
        future_first = keys.bucket_of(now + timedelta(hours=1), 60)
        future_buckets = 30 * 24 * 60
        rates = {}
        stored = 0
        for round_, future in enumerate((100_000, args.future)):
            t0 = time.perf_counter()
            fill(team, future_first, future_buckets, future - stored)
            stored = future
            say(f"fill_seconds[future={future}]", time.perf_counter() - t0, "s")
            runs = []
            for repeat in range(args.repeat):
                due_bucket = keys.bucket_of(now, 60) - timedelta(minutes=10 + 10 * round_ + repeat)
                fill(team, due_bucket, 1, args.due)
                settle()
                runs.append(claim_rate(due_bucket, db_now(), args.batch))
            rates[future] = statistics.median(runs)
            say(f"claim_done_rows_per_second[future={future}]", rates[future], "rows/s")
            say(
                f"claim_done_runs[future={future}]",
                len(runs),
                "runs: " + ", ".join(f"{r:,.0f}" for r in runs),
            )
        small, big = rates[100_000], rates[args.future]
        say("claim_rate_change_percent", 100 * (big - small) / small, "%")
        seconds = catch_up(db_now())
        say("catchup_seconds_7_days_all_shards", seconds, "s")
        say("catchup_seconds_per_shard", seconds / SHARDS, "s")
    finally:
        connections.close_all()
        if not args.keep:
            drop_database(DB)


if __name__ == "__main__":
    main()
