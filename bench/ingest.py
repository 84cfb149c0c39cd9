"""Ingest benchmark: service-level ``job_schedule_many`` and the REST bulk endpoint.

Service level: (re)creates ``sendlater_bench_scale_ingest``, migrates it, creates
partitions ahead, then schedules N jobs (default 200,000) through
``job_schedule_many`` in batches of 1,000 from one process, or from P forked
processes each taking every P-th batch (``--processes``), timed end to end
(validation, bucket counts, COPY). REST: runs ``bench/api_ingest.py`` (gunicorn, 2
workers by default, its own database ``sendlater_bench_scale_api``) and prints
its figures prefixed ``rest_``. Both databases are dropped at the end.

    .venv/bin/python bench/ingest.py [--jobs 200000] [--processes 1] [--rest-jobs 100000]
        [--workers 2] [--database NAME] [--rest-database NAME]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _raw import (  # noqa: E402
    ADMIN_URL,
    django_setup,
    drop_database,
    run_workers,
    say,
    scratch_database,
)

DB = "sendlater_bench_scale_ingest"
REST_DB = "sendlater_bench_scale_api"


_SHARE: dict = {}  # what forked workers inherit: the prepared specs and the team


def _schedule_share(first: int, step: int, batch: int) -> int:
    from django.db import connections

    from scheduling.jobs.services import job_schedule_many

    specs, team, done = _SHARE["specs"], _SHARE["team"], 0
    for offset in range(first, len(specs), step):
        chunk = specs[offset : offset + batch]
        job_schedule_many(team=team, specs=chunk)
        done += len(chunk)
    connections.close_all()
    return done


def service(jobs: int, batch: int, database: str, processes: int = 1) -> None:
    django_setup(scratch_database(database))
    from django.core.management import call_command
    from django.db import connections

    from scheduling.jobs.services import JobSpec, job_schedule_many
    from scheduling.models import Job, Team
    from scheduling.sharding.clock import db_now
    from scheduling.storage.partitions import partitions_ensure

    call_command("migrate", verbosity=0)
    partitions_ensure(now=db_now(), days=3)
    team = Team.objects.create(slug="bench", name="Bench")
    start = db_now() + timedelta(minutes=5)
    specs = [
        JobSpec(
            due_at=start + timedelta(seconds=i * 86400 / jobs),
            target_kind="handler",
            target="noop",
            payload={"i": i, "kind": "reminder"},
            metadata={"source": "bench"},
        )
        for i in range(jobs)
    ]
    job_schedule_many(team=team, specs=specs[:batch])  # warm-up: first bucket counts
    if processes == 1:
        t0 = time.perf_counter()
        for offset in range(batch, jobs, batch):
            job_schedule_many(team=team, specs=specs[offset : offset + batch])
        seconds = time.perf_counter() - t0
    else:
        # Forked workers inherit the prepared specs; each takes every P-th batch on
        # its own connection (Django reconnects in the child).
        _SHARE.update(specs=specs, team=team)
        connections.close_all()
        args = [(batch + p * batch, processes * batch, batch) for p in range(processes)]
        done, seconds = run_workers(_schedule_share, args)
        assert done == jobs - batch, f"workers scheduled {done} of {jobs - batch}"
    assert Job.objects.count() == jobs, "not every job landed"
    say("service_jobs", jobs, "jobs")
    say("service_batch", batch, "jobs")
    say("service_processes", processes, "processes")
    say("service_jobs_per_second", (jobs - batch) / seconds, "jobs/s")
    say("service_ms_per_1000_jobs", 1000 * seconds / ((jobs - batch) / 1000), "ms")


def rest(jobs: int, workers: int, port: int, database: str) -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "api_ingest.py"), "--jobs", str(jobs)]
    cmd += ["--workers", str(workers), "--port", str(port), "--database", database]
    cmd += ["--pg", ADMIN_URL.rsplit("/", 1)[0]]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if ":" in line:
            print(f"rest_{line.strip()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--processes", type=int, default=1, help="service level: scheduling processes"
    )
    parser.add_argument("--rest-jobs", type=int, default=100_000, help="0 skips the REST run")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (REST)")
    parser.add_argument("--port", type=int, default=8450)
    parser.add_argument("--database", default=DB, help="scratch database (service level)")
    parser.add_argument("--rest-database", default=REST_DB, help="scratch database (REST)")
    args = parser.parse_args()
    if min(args.jobs, args.batch, args.processes) < 1 or args.jobs <= args.batch:
        parser.error("--jobs, --batch and --processes must be positive, --jobs above --batch")
    try:
        service(args.jobs, args.batch, args.database, args.processes)
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(args.database)
    if args.rest_jobs:
        rest(args.rest_jobs, args.workers, args.port, args.rest_database)


if __name__ == "__main__":
    main()
