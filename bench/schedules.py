"""Recurring schedules: materialization rate, then delivery lag with P pollers (noop).

Usage (from the repository root, PostgreSQL on 127.0.0.1:5432):

    .venv/bin/python bench/schedules.py                    # 100,000 schedules, every minute
    .venv/bin/python bench/schedules.py -n 20000 --duration 90 --database x_h15

1. Drops and recreates its database, migrates it, creates N schedules firing every
   minute (``every_seconds=60``, their start times spread over one minute, as
   schedules created at different moments are; ``--cron`` makes them all
   ``* * * * *``: one 100,000-job burst at every minute's start instead). The first
   instants lie after the materialization phase (``--lead``), so the pollers start
   before anything is due.
2. Materialization rate: one planner in this process owns every shard (leases taken
   as a poller takes them) and calls ``polling.upkeep.schedules.schedules_materialize``
   until every schedule is planned ``2 * SENDLATER_SCHEDULE_AHEAD_SECONDS`` ahead;
   prints occurrences per second (wall time of the calls, bulk COPY included).
3. Delivery: releases those leases, starts P ``runpoller`` processes (handler
   ``noop``), lets them run ``--duration`` seconds (they keep materializing and
   deliver), stops them, and prints ``delivered_at - scheduled_for`` percentiles of
   the occurrences due in the window, the ones not delivered, and doubles (more than
   one live job for one schedule and instant: must be 0).

Prints ``name: value unit`` lines; stops every process it started; drops the database.
"""

from __future__ import annotations

import argparse
import atexit
import io
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_children: list[subprocess.Popen[bytes]] = []
PLANNER = "bench-planner"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--schedules", type=int, default=100_000)
    parser.add_argument("-s", "--shards", type=int, default=64)
    parser.add_argument("-p", "--pollers", type=int, default=2)
    parser.add_argument("--ahead", type=int, default=300, help="SENDLATER_SCHEDULE_AHEAD_SECONDS")
    parser.add_argument("--duration", type=float, default=150, help="delivery phase (s)")
    parser.add_argument("--lead", type=float, default=0, help="first instants after (s)")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--cron", action="store_true", help="cron '* * * * *' (all at :00)")
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--database", default="sendlater_bench_scale_schedules")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    return parser.parse_args()


def stop_children() -> None:
    from polling.common.processes import processes_stop

    processes_stop(_children, grace_seconds=30)
    _children.clear()


def database(server: str, name: str, *, create: bool) -> None:
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if create:
            conn.execute(f'CREATE DATABASE "{name}"')


def main() -> int:
    args = parse()
    env = {
        "DATABASE_URL": f"{args.server}/{args.database}",
        "DJANGO_SETTINGS_MODULE": "sendlater_site.settings",
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only"),
        "SENDLATER_ENCRYPTION_KEYS": os.environ.get(
            "SENDLATER_ENCRYPTION_KEYS", "YmVuY2gtb25seS1ub3QtYS1zZWNyZXQteHh4eHh4eHg="
        ),
        "SENDLATER_DEFAULT_SHARDS": str(args.shards),
        "SENDLATER_SCHEDULE_AHEAD_SECONDS": str(args.ahead),
        "SENDLATER_DB_POOL": "false",
        "SENDLATER_PARTITION_AHEAD_DAYS": "2",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    os.environ.update(env)
    atexit.register(stop_children)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    database(args.server, args.database, create=True)

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("partitions", "--ensure", "--days", "2", verbosity=0, stdout=io.StringIO())
    try:
        create_schedules(args)
        materialization_rate(args)
        delivery(args, dict(os.environ))
    finally:
        stop_children()
        if not args.keep:
            from django.db import connections

            connections.close_all()
            database(args.server, args.database, create=False)
    return 0


def create_schedules(args: argparse.Namespace) -> None:
    from scheduling import keys
    from scheduling.models import Schedule, Team
    from scheduling.sharding.clock import db_now

    team, _ = Team.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    now = db_now().replace(microsecond=0)
    # The first instants come after the materialization phase (~20,000 occurrences/s,
    # ten per schedule) and the pollers' start: the delivery phase then measures the
    # steady stream, not a backlog of instants that passed while nobody delivered.
    first = now + timedelta(seconds=args.lead or 45 + args.schedules * 10 / 15_000)
    started = time.monotonic()
    rows = []
    for i in range(args.schedules):
        schedule_id = uuid.uuid4()
        start = first + timedelta(seconds=60 * i / args.schedules)
        if args.cron:
            start = first.replace(second=0) + timedelta(minutes=1)
        rows.append(
            Schedule(
                id=schedule_id,
                team=team,
                cron="* * * * *" if args.cron else None,
                every_seconds=None if args.cron else 60,
                timezone="UTC",
                target_kind="handler",
                target="noop",
                payload={"i": i},
                anchor_at=start,
                start_at=None if args.cron else start,
                shard_hash=keys.shard_of(schedule_id, 2**32),
                next_at=start,
                created_at=now,
                updated_at=now,
            )
        )
    Schedule.objects.bulk_create(rows, batch_size=5000)
    print(f"schedules: {args.schedules} count ({'cron * * * * *' if args.cron else 'every 60 s'})")
    print(f"create_seconds: {time.monotonic() - started:.1f} s")


def materialization_rate(args: argparse.Namespace) -> None:
    from polling.ownership import leases, registration
    from polling.upkeep.schedules import schedules_materialize
    from scheduling.models import ScheduleOccurrence
    from scheduling.sharding.clock import db_now

    registration.shard_rows_ensure(shard_count=args.shards)
    now = db_now()
    leases = leases.lease_acquire(
        owner=PLANNER, shards=range(args.shards), now=now, until=now + timedelta(hours=1)
    )
    total, calls, busy = 0, 0, 0.0
    while True:
        t0 = time.monotonic()
        written = schedules_materialize(owner=PLANNER, leases=leases, now=db_now())
        busy += time.monotonic() - t0
        calls += 1
        total += written
        if not written:
            break
    leases.lease_release(owner=PLANNER, shards=range(args.shards))
    assert ScheduleOccurrence.objects.count() == total
    print(f"materialized: {total} occurrences in {calls} calls")
    print(f"materialize_seconds: {busy:.1f} s")
    print(f"materialize_rate: {total / busy:.0f} occurrences/s")


def delivery(args: argparse.Namespace, env: dict[str, str]) -> None:
    from django.db import connection

    from scheduling.models import Schedule
    from scheduling.sharding.clock import db_now

    started = db_now()
    first = Schedule.objects.order_by("anchor_at").values_list("anchor_at", flat=True)[0]
    if started > first:
        print(
            f"warning: pollers started {(started - first).total_seconds():.0f} s"
            " after the first instants"
        )
    for i in range(args.pollers):
        cmd = [sys.executable, str(ROOT / "manage.py"), "runpoller", "--name", f"bench-{i}"]
        cmd += ["--batch-size", str(args.batch_size), "--concurrency", str(args.concurrency)]
        cmd += ["--poll-interval", "0.2"]
        _children.append(subprocess.Popen(cmd, cwd=ROOT, env=env))
    time.sleep(args.duration)
    ended = db_now()
    stop_children()
    # The window: from the first instant (the pollers have had their leases for a while
    # by then) to 10 s before the end.
    window = (max(first, started + timedelta(seconds=10)), ended - timedelta(seconds=10))
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH d AS (
                SELECT status, EXTRACT(EPOCH FROM delivered_at - scheduled_for) AS lag
                FROM scheduling_job
                WHERE schedule_id IS NOT NULL AND scheduled_for >= %s AND scheduled_for < %s
            )
            SELECT count(*), count(*) FILTER (WHERE status = 'delivered'),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY lag),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY lag), max(lag)
            FROM d
            """,
            window,
        )
        due, delivered, p50, p99, worst = cursor.fetchone()
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM scheduling_job WHERE schedule_id IS NOT NULL"
            " AND status <> 'canceled' GROUP BY schedule_id, scheduled_for HAVING count(*) > 1) x"
        )
        (doubled,) = cursor.fetchone()
        cursor.execute(
            "SELECT count(*) FROM scheduling_schedule WHERE next_at <= %s",
            [ended + timedelta(seconds=args.ahead)],
        )
        (behind,) = cursor.fetchone()
    tag = f"[P={args.pollers}]"
    seconds = (window[1] - window[0]).total_seconds()
    print(f"occurrences_due_in_window{tag}: {due} ({seconds:.0f} s)")
    print(f"delivered_per_second{tag}: {delivered / seconds:.0f} jobs/s")
    print(f"not_delivered_in_window{tag}: {due - delivered} jobs")
    print(f"lag_p50_seconds{tag}: {float(p50 or 0):.3f} s")
    print(f"lag_p99_seconds{tag}: {float(p99 or 0):.3f} s")
    print(f"lag_max_seconds{tag}: {float(worst or 0):.3f} s")
    print(f"doubled{tag}: {doubled} occurrences")
    print(f"schedules_not_planned_ahead_at_end{tag}: {behind} count")


if __name__ == "__main__":
    sys.exit(main())
