"""Burst benchmark: N jobs due within one minute (one bucket), P pollers, noop handler.

Usage (from the repository root, PostgreSQL on 127.0.0.1:5432):

    .venv/bin/python bench/burst.py                       # N=1000000, S=64, P=1,2
    .venv/bin/python bench/burst.py -n 50000 -p 1,2,4     # one run per poller count

Creates (drops and recreates) the database ``sendlater_bench_scale_burst``, creates
its partitions, schedules the jobs through ``job_schedule_many`` (due times spread
evenly over one whole minute), starts P ``runpoller`` processes, waits until every
job is delivered, and prints ``name: value unit`` lines. Spread over a minute, the
jobs fall due at N/60 per second, so that run cannot show more than the arrival
rate: for each P a second run (``--capacity-jobs``, default 300,000) puts a
backlog due at one instant and measures how fast the pollers drain it. First it
runs ``bench/limits.py`` (raw SQL claim + mark-done with 2 workers on a table of N
rows) so the service's drain rate is also printed as a ratio to the raw rate of
the same run.
Every poller it starts is stopped on exit, whatever happens; the database is dropped.
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
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_children: list[subprocess.Popen[bytes]] = []


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=1_000_000)
    parser.add_argument("-s", "--shards", type=int, default=64)
    parser.add_argument("-p", "--pollers", default="1,2", help="comma-separated, e.g. 1,2,4")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--spread", type=float, default=59.9, help="due times spread (s), within one minute"
    )
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--database", default="sendlater_bench_scale_burst")
    parser.add_argument(
        "--via",
        default="",
        help="run the service through this server URL instead (pgbouncer, e.g."
        " postgres://postgres@127.0.0.1:55440, with SENDLATER_PGBOUNCER=1); the database"
        " is still created and dropped on --server",
    )
    parser.add_argument(
        "--capacity-jobs",
        type=int,
        default=300_000,
        help="then this many jobs due at one instant: the drain rate of a backlog (0: skip)",
    )
    parser.add_argument("--no-limits", action="store_true", help="skip the raw SQL reference")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--timeout", type=float, default=900, help="per run (s)")
    return parser.parse_args()


def stop_children() -> None:
    from polling.common.processes import processes_stop

    processes_stop(_children, grace_seconds=30)
    _children.clear()


def recreate_database(server: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def main() -> int:
    args = parse()
    counts = [int(p) for p in args.pollers.split(",")]
    env = {
        "DATABASE_URL": f"{args.via or args.server}/{args.database}",
        "SENDLATER_PGBOUNCER": "1" if args.via else "0",
        "DJANGO_SETTINGS_MODULE": "sendlater_site.settings",
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only"),
        "SENDLATER_ENCRYPTION_KEYS": os.environ.get(
            "SENDLATER_ENCRYPTION_KEYS", "YmVuY2gtb25seS1ub3QtYS1zZWNyZXQteHh4eHh4eHg="
        ),
        "SENDLATER_DEFAULT_SHARDS": str(args.shards),
        "SENDLATER_DB_POOL": "false",
        # The partitions the burst needs exist (below); pollers keep 2 days ahead.
        "SENDLATER_PARTITION_AHEAD_DAYS": "2",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    os.environ.update(env)
    atexit.register(stop_children)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    recreate_database(args.server, args.database)

    import django

    django.setup()
    from django.core.management import call_command

    raw = None if args.no_limits else raw_claim_done_rate(args)
    call_command("migrate", verbosity=0)
    call_command("partitions", "--ensure", "--days", "2", verbosity=0, stdout=io.StringIO())
    print(f"jobs: {args.jobs} count")
    print(f"shards: {args.shards} count")
    print(f"batch_size: {args.batch_size} jobs")
    print(f"via: {'pgbouncer ' + args.via if args.via else 'direct'}")
    try:
        for pollers in counts:
            run(args, pollers, dict(os.environ), f"P={pollers}")
            if args.capacity_jobs:
                # Jobs spread over the minute arrive at N/60 per second: the run above
                # cannot drain faster than they fall due. The service's own rate, to
                # compare with the raw claim + done rate, is that of a backlog.
                backlog = argparse.Namespace(**{**vars(args), "jobs": args.capacity_jobs})
                backlog.spread = 0.001
                tag = f"capacity,P={pollers}"
                rate = run(backlog, pollers, dict(os.environ), tag)
                if raw:
                    print(f"ratio_to_raw[{tag}]: {rate / raw:.2f} (raw {raw:.0f} rows/s)")
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            drop_database(args.server, args.database)
    return 0


def raw_claim_done_rate(args: argparse.Namespace) -> float:
    """Run bench/limits.py on a table of N rows; echo its lines, return claim+done rows/s."""
    cmd = [sys.executable, str(ROOT / "bench" / "limits.py"), "--jobs", str(args.jobs)]
    cmd += ["--shards", str(args.shards), "--workers", "2"]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    rate = 0.0
    for line in out.splitlines():
        print(f"limits_{line}", flush=True)
        if line.startswith("raw_claim_done_rows_per_second:"):
            rate = float(line.split(":")[1].split()[0].replace(",", ""))
    return rate


def drop_database(server: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def peak_rss_mb(pid: int) -> float:
    """VmHWM (peak resident set) of a live process, in MiB; 0 if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def backend_cpu_seconds(database: str) -> dict[int, float]:
    """CPU time (user + system) of each PostgreSQL process serving ``database``.

    Backends and autovacuum workers name their database in their command line
    (``postgres: user database host ...``); other clusters' clients are left out.
    """
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, float] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() != "postgres":
                continue
            if f" {database} " not in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(proc.name)] = (int(fields[11]) + int(fields[12])) / tick
    return found


def process_cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a live process and its reaped children; 0 if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def run(args: argparse.Namespace, pollers: int, env: dict[str, str], label: str) -> float:
    from django.db import connection

    from scheduling import keys
    from scheduling.jobs.services import JobSpec, job_schedule_many
    from scheduling.models import Team
    from scheduling.sharding.clock import db_now

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scheduling_job, scheduling_deliveryattempt, scheduling_bucket,"
            " polling_poller, polling_shardlease, polling_shardcheckpoint"
        )
    team, _ = Team.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    # Leave room to insert the jobs and start the pollers before the burst; the
    # burst's minute opens at ``first`` (a bucket boundary).
    lead = 15 + args.jobs / 12_000  # job_schedule_many writes 16,000-28,000 jobs/s here
    first = keys.bucket_end(keys.bucket_of(db_now() + timedelta(seconds=lead), 60), 60)
    spread = min(args.spread, 59.999)
    started = time.monotonic()
    chunk = 10_000
    for offset in range(0, args.jobs, chunk):
        specs = [
            JobSpec(
                due_at=first + timedelta(seconds=spread * i / args.jobs),
                target_kind="handler",
                target="noop",
                payload={"i": i},
            )
            for i in range(offset, min(args.jobs, offset + chunk))
        ]
        job_schedule_many(team=team, specs=specs)
    print(f"schedule_seconds[{label}]: {time.monotonic() - started:.1f} s")
    if db_now() >= first:
        print("warning: the burst was due before all jobs were written", file=sys.stderr)
    database = connection.settings_dict["NAME"]
    cpu_before = backend_cpu_seconds(database)
    for i in range(pollers):
        cmd = [sys.executable, str(ROOT / "manage.py"), "runpoller", "--name", f"bench-{i}"]
        cmd += ["--batch-size", str(args.batch_size), "--concurrency", str(args.concurrency)]
        cmd += ["--poll-interval", "0.2"]
        _children.append(subprocess.Popen(cmd, cwd=ROOT, env=env))
    deadline = time.monotonic() + args.timeout + lead
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            # Is anything left? One probe of the pending rows' partial index (ordered
            # by its columns so the planner walks the index; jobs in flight are still
            # pending), not a count: the check must not take CPU from the pollers.
            cursor.execute(
                "SELECT (SELECT due_at FROM scheduling_job WHERE status = 'pending'"
                " ORDER BY bucket, shard, due_at LIMIT 1) IS NOT NULL"
            )
            (left,) = cursor.fetchone()
        if not left:
            break
        time.sleep(0.5)
    rss = max(peak_rss_mb(child.pid) for child in _children)
    cpu_after = backend_cpu_seconds(database)
    postgres_cpu = sum(t - cpu_before.get(pid, 0.0) for pid, t in cpu_after.items())
    poller_cpu = sum(process_cpu_seconds(child.pid) for child in _children)
    stop_children()
    print(f"poller_peak_rss_mb[{label}]: {rss:.0f} MiB")
    # Per job drained: the database's backends for this database (the pollers' and the
    # probe's connections, autovacuum), and the pollers' own processes (whole runs,
    # start-up included).
    print(f"postgres_cpu_us_per_job[{label}]: {postgres_cpu / args.jobs * 1e6:.1f} us")
    print(f"poller_cpu_us_per_job[{label}]: {poller_cpu / args.jobs * 1e6:.1f} us")
    return report(args.jobs, pollers, first, label)


def report(n: int, pollers: int, opened, label: str) -> float:  # type: ignore[no-untyped-def]
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH d AS (
                SELECT status, attempts, due_at, delivered_at,
                       EXTRACT(EPOCH FROM delivered_at - due_at) AS lag
                FROM scheduling_job
            )
            SELECT count(*) FILTER (WHERE status = 'delivered'),
                   COALESCE(sum(attempts), 0) - count(*) FILTER (WHERE attempts > 0),
                   EXTRACT(EPOCH FROM max(delivered_at) - min(due_at)),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY lag),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY lag),
                   max(lag),
                   count(*) FILTER (WHERE delivered_at < due_at),
                   EXTRACT(EPOCH FROM max(delivered_at) - %s)
            FROM d
            """,
            [opened],
        )
        delivered, duplicates, span, p50, p99, worst, early, drained = cursor.fetchone()
    tag = f"[{label}]"
    rate = delivered / float(span) if span else 0.0
    print(f"pollers{tag}: {pollers} count")
    print(f"delivered_per_second{tag}: {rate:.0f} jobs/s")
    print(f"lag_p50_seconds{tag}: {float(p50 or 0):.3f} s")
    print(f"lag_p99_seconds{tag}: {float(p99 or 0):.3f} s")
    print(f"lag_max_seconds{tag}: {float(worst or 0):.3f} s")
    print(f"lost{tag}: {n - delivered} jobs")
    print(f"duplicates{tag}: {duplicates} jobs")
    print(f"early{tag}: {early} jobs")
    print(f"drained_seconds_after_minute_opened{tag}: {float(drained or 0):.1f} s")
    return rate


if __name__ == "__main__":
    sys.exit(main())
