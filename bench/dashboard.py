"""Dashboard benchmark: the lag dashboard's render time with 256 shards and 1M pending jobs.

Usage (from the repository root, PostgreSQL on 127.0.0.1:5432):

    .venv/bin/python bench/dashboard.py                  # 1,000,000 pending, 256 shards
    .venv/bin/python bench/dashboard.py --due-fraction 1 # every pending job already due
    .venv/bin/python bench/dashboard.py --held-share 0.5 # half the due jobs held by flow
                                                         # control (20 keys: paused, rate)

Creates (drops and recreates) the database ``sendlater_bench_console``, loads the
jobs with COPY (a share of them already due and lagging behind the checkpoints,
the rest spread over the next day, plus recent deliveries for the time series),
VACUUM ANALYZEs, then renders /admin/console/ through Django's test client several
times and prints ``name: value unit`` lines. The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=1_000_000, help="pending jobs")
    parser.add_argument("-s", "--shards", type=int, default=256)
    parser.add_argument("--due-fraction", type=float, default=0.05, help="share already due")
    parser.add_argument("--delivered", type=int, default=50_000, help="delivered, last 30 min")
    parser.add_argument(
        "--held-share",
        type=float,
        default=0.0,
        help="share of the due jobs whose flow-control key holds them (half paused, half "
        "drawing a rate), spread over --held-keys keys",
    )
    parser.add_argument("--held-keys", type=int, default=20)
    parser.add_argument("--renders", type=int, default=15)
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--database", default="sendlater_bench_console")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    return parser.parse_args()


def admin_sql(server: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(sql)


def load(args: argparse.Namespace, now: datetime) -> None:
    """Shards, pollers, leases, checkpoints and jobs, written straight to the tables."""
    import mmh3
    from django.db import connection

    from polling.models import Poller, ShardCheckpoint, ShardLease
    from polling.ownership.registration import shard_rows_ensure
    from scheduling import keys
    from scheduling.models import Bucket, ShardCountSchedule, Team

    width = 60
    ShardCountSchedule.objects.update(shard_count=args.shards)
    shard_rows_ensure(shard_count=args.shards)
    names = [f"poller-{i}" for i in range(4)]
    for name in names:
        Poller.objects.create(
            name=name, host="bench", pid=1, started_at=now, heartbeat_at=now, version="bench"
        )
    for shard in range(args.shards):
        ShardLease.objects.filter(shard=shard).update(
            owner=names[shard % 4], epoch=1, expires_at=now + timedelta(seconds=15)
        )
    # The pollers are twelve minutes behind: every due job lags.
    ShardCheckpoint.objects.update(last_drained=keys.bucket_of(now - timedelta(minutes=12), 60))
    team = Team.objects.create(slug="bench", name="Bench")
    due_count = int(args.jobs * args.due_fraction)
    held_count = int(due_count * args.held_share)
    if held_count:
        from scheduling.flow.models import FlowControl

        FlowControl.objects.bulk_create(
            FlowControl(
                team=team,
                key=f"held-{k}",
                rate=None if k % 2 else 10,
                paused=bool(k % 2),
                tat=None if k % 2 else now + timedelta(minutes=5),  # drawing its rate
                created_at=now,
                updated_at=now,
            )
            for k in range(args.held_keys)
        )
    rng = random.Random(7)
    buckets: set[datetime] = set()
    columns = (
        "id, team_id, due_at, bucket, shard, status, target_kind, target, payload, metadata,"
        " request_fingerprint, window_seconds, attempts, last_error, created_at, updated_at,"
        " delivered_at, flow_control_key"
    )
    started = time.perf_counter()
    with (
        connection.cursor() as cursor,
        cursor.connection.cursor() as raw,
        raw.copy(f"COPY scheduling_job ({columns}) FROM STDIN") as copy,
    ):
        for i in range(args.jobs + args.delivered):
            job_id = uuid.uuid4()
            if i < due_count:
                due = now - timedelta(seconds=rng.uniform(1, 600))
            elif i < args.jobs:
                due = now + timedelta(seconds=rng.uniform(1, 86_400))
            else:
                due = now - timedelta(seconds=rng.uniform(60, 1_800))
            delivered = i >= args.jobs
            bucket = keys.bucket_of(due, width)
            buckets.add(bucket)
            copy.write_row(
                (
                    job_id,
                    team.pk,
                    due,
                    bucket,
                    mmh3.hash(str(job_id), signed=False) % args.shards,
                    "delivered" if delivered else "pending",
                    "handler",
                    "noop",
                    "{}",
                    "{}",
                    "",
                    0,
                    1 if delivered else 0,
                    "",
                    now,
                    now,
                    due + timedelta(seconds=rng.uniform(0, 30)) if delivered else None,
                    f"held-{i % args.held_keys}" if i < held_count else None,
                )
            )
    Bucket.objects.bulk_create(
        [Bucket(start=b, shard_count=args.shards) for b in buckets], ignore_conflicts=True
    )
    print(f"load_seconds: {time.perf_counter() - started:.1f} s")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def render(args: argparse.Namespace) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    user = get_user_model().objects.create_superuser("bench", "bench@example.com", "pw-bench-1")
    client = Client()
    client.force_login(user)

    def timed(url: str) -> list[float]:
        for _ in range(2):  # warm caches and the connection pool
            assert client.get(url).status_code == 200
        times = []
        for _ in range(args.renders):
            started = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.status_code
        return times

    times = timed("/admin/console/")
    with CaptureQueriesContext(connection) as queries:
        client.get("/admin/console/")
    print(f"dashboard_ms_p50: {statistics.median(times):.0f} ms")
    print(f"dashboard_ms_p90: {statistics.quantiles(times, n=10)[-1]:.0f} ms")
    print(f"dashboard_ms_max: {max(times):.0f} ms")
    print(f"dashboard_queries: {len(queries.captured_queries)}")
    slow = sorted(queries.captured_queries, key=lambda q: -float(q["time"]))[:3]
    for q in slow:
        print(f"  {float(q['time']) * 1000:.0f} ms  {q['sql'][:110]}")
    for name, url in [
        ("jobs_changelist", "/admin/scheduling/job/"),
        ("jobs_pending_next_hour", "/admin/scheduling/job/?status__exact=pending&due=next-hour"),
        ("pollers_page", "/admin/console/pollers/"),
    ]:
        print(f"{name}_ms_p50: {statistics.median(timed(url)):.0f} ms")


def main() -> int:
    args = parse()
    admin_sql(args.server, f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
    admin_sql(args.server, f'CREATE DATABASE "{args.database}"')
    os.environ.update(
        DATABASE_URL=f"{args.server}/{args.database}",
        SECRET_KEY="bench-only-not-a-secret",
        SENDLATER_ENCRYPTION_KEYS=os.environ.get(
            "SENDLATER_ENCRYPTION_KEYS", "YmVuY2gtb25seS1ub3QtYS1zZWNyZXQteHh4eHh4eHg="
        ),
        SECURE_SSL_REDIRECT="false",
        ALLOWED_HOSTS="testserver",
        DJANGO_SETTINGS_MODULE="sendlater_site.settings",
        LOG_LEVEL="WARNING",
    )
    import warnings

    import django

    warnings.filterwarnings("ignore", message="No directory at")  # no collectstatic here
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    try:
        call_command("migrate", verbosity=0)
        now = datetime.now(UTC)
        print(
            f"shards: {args.shards}  pending_jobs: {args.jobs}  "
            f"due_now: {int(args.jobs * args.due_fraction)}  delivered_30min: {args.delivered}  "
            f"held_share: {args.held_share}"
        )
        load(args, now)
        render(args)
    finally:
        connection.close()
        if connection.vendor == "postgresql":
            connection.close_pool()
        if not args.keep:
            admin_sql(args.server, f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
