"""Flow-control benchmark: a rate-limited key, a parallelism-limited key and unlimited
traffic in the same shards, delivered as webhooks by P pollers.

Usage (from the repository root, PostgreSQL on 127.0.0.1:5432):

    .venv/bin/python bench/flow.py                    # the issue's sizes, 2 pollers
    .venv/bin/python bench/flow.py --rate-jobs 4000 --plain-jobs 20000 --spread 20

Drops and recreates the database ``sendlater_bench_flow`` and starts one receiver
process (asyncio HTTP/1.1, keep-alive) on three loopback addresses, one per kind
(``SENDLATER_CALLBACK_ALLOWLIST=127.0.0.0/8``):

- ``/rate``: the jobs of key ``limited`` (``--rate`` per second, default 200), a
  backlog of ``--rate-jobs`` (20,000) due at one instant; the receiver counts
  arrivals per second;
- ``/par``: the jobs of key ``narrow`` (``--parallelism`` 10), ``--par-jobs`` (2,000)
  due at the same instant; the receiver answers each after ``--par-delay`` (0.05 s)
  and records the most requests it held at once;
- ``/plain``: ``--plain-jobs`` (100,000) jobs without limits — a third without a key,
  the rest spread over 100 keys that have no limits — due evenly over ``--spread``
  seconds (100) from the same instant; the receiver records each one's lag behind
  its due time.

Every job is scheduled through ``job_schedule_many`` with its key, so the three
kinds share every shard; the limits are set before the pollers start. Prints
``name: value unit`` lines: the limited key's rate per second over its run (mean,
min, max of whole seconds, the share of seconds within ±10 % of the limit), the
narrow key's highest concurrency, the unlimited jobs' lag p50/p99, lost, duplicates
and early. Everything it starts is stopped and the database is dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._webhooks import (  # noqa: E402
    pollers_stop,
    receiver_stats,
    receivers_serve,
    webhook_bench,
)

# Each kind has its own receiving address, as a partner's endpoint would: the per-host
# cap and pace of the webhook engine (docs/delivery.md) then apply to each apart.
HOSTS = {"rate": "127.0.0.2", "par": "127.0.0.3", "plain": "127.0.0.1"}
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok"
_children: list[subprocess.Popen[bytes]] = []


def receiver(port: int, par_delay: float) -> None:
    """Serve until killed. POST /rate, /par, /plain: record; GET /stats: report."""
    seen: dict[str, int] = {}  # webhook-id -> arrivals
    rate_at: list[float] = []
    plain_lag: list[float] = []
    par = {"now": 0, "most": 0, "n": 0}
    early = [0]

    def stats() -> bytes:
        lags = sorted(plain_lag)

        def pct(q: float) -> float:
            return lags[min(len(lags) - 1, int(q * len(lags)))] if lags else 0.0

        report = {
            "unique": len(seen),
            "requests": sum(seen.values()),
            "early": early[0],
            "rate_at": sorted(rate_at),
            "par_most": par["most"],
            "par_n": par["n"],
            "plain_n": len(lags),
            "plain_p50": pct(0.5),
            "plain_p99": pct(0.99),
            "plain_max": lags[-1] if lags else 0.0,
        }
        return json.dumps(report).encode()

    async def answer(line: str, headers: dict[str, str], body: bytes, _local: str) -> bytes:
        now = time.time()
        job_id = headers.get("webhook-id", "")
        first = job_id not in seen
        seen[job_id] = seen.get(job_id, 0) + 1
        due = json.loads(body).get("payload", {}).get("d", now) if first else now
        early[0] += first and now < due
        path = line.split(" ")[1]
        if path == "/par":
            par["now"] += 1
            par["n"] += first
            par["most"] = max(par["most"], par["now"])
            try:
                await asyncio.sleep(par_delay)
            finally:
                par["now"] -= 1
        elif first and path == "/rate":
            rate_at.append(now)
        elif first:
            plain_lag.append(now - due)
        return RESPONSE

    receivers_serve(answer, stats, list(HOSTS.values()), port)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=200, help="key limited: deliveries/s")
    parser.add_argument("--rate-jobs", type=int, default=20_000)
    parser.add_argument("--parallelism", type=int, default=10, help="key narrow")
    parser.add_argument("--par-jobs", type=int, default=2_000)
    parser.add_argument("--par-delay", type=float, default=0.05, help="receiver's answer (s)")
    parser.add_argument("--plain-jobs", type=int, default=100_000)
    parser.add_argument("--spread", type=float, default=100.0, help="unlimited jobs (s)")
    parser.add_argument("-p", "--pollers", type=int, default=2)
    parser.add_argument("--port", type=int, default=8660)
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--database", default="sendlater_bench_flow")
    parser.add_argument("--timeout", type=float, default=600, help="for the run (s)")
    args = parser.parse_args()
    sizes = (args.rate, args.rate_jobs, args.parallelism, args.par_jobs, args.plain_jobs)
    if min(sizes) < 1 or args.pollers < 1 or args.spread <= 0 or args.par_delay < 0:
        parser.error("sizes, rates, --pollers and --spread must be positive")
    return args


def main() -> int:
    args = parse()
    with webhook_bench(
        server=args.server,
        database=args.database,
        receiver=receiver,
        receiver_args=(args.port, args.par_delay),
        children=_children,
    ):
        run(args)
    return 0


def _schedule(team, url: str, count: int, first, spread: float, key) -> None:
    """``key``: the flow-control key of job ``i`` (``key(i)``)."""
    from scheduling.jobs.services import JobSpec, job_schedule_many

    chunk = 10_000
    for offset in range(0, count, chunk):
        specs = []
        for i in range(offset, min(count, offset + chunk)):
            due = first + timedelta(seconds=spread * i / count)
            payload = {"i": i, "d": due.timestamp()}
            specs.append(
                JobSpec(
                    due_at=due,
                    target_kind="webhook",
                    target=url,
                    payload=payload,
                    flow_control_key=key(i),
                )
            )
        job_schedule_many(team=team, specs=specs)


def run(args: argparse.Namespace) -> None:

    from scheduling.flow.services import flow_limits_set
    from scheduling.models import Team
    from scheduling.sharding.clock import db_now

    team, _ = Team.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    total = args.rate_jobs + args.par_jobs + args.plain_jobs
    lead = 10 + total / 15_000  # time to write the jobs and start the pollers
    first = db_now() + timedelta(seconds=lead)
    url = {kind: f"http://{host}:{args.port}/{kind}" for kind, host in HOSTS.items()}
    _schedule(team, url["rate"], args.rate_jobs, first, 0.0, lambda i: "limited")
    _schedule(team, url["par"], args.par_jobs, first, 0.0, lambda i: "narrow")
    _schedule(
        team,
        url["plain"],
        args.plain_jobs,
        first,
        args.spread,
        lambda i: None if i % 3 == 0 else f"free-{i % 100}",
    )
    flow_limits_set(team=team, key="limited", rate=args.rate, period_seconds=1)
    flow_limits_set(team=team, key="narrow", rate=None, parallelism=args.parallelism)
    if (db_now() - first).total_seconds() > -2:
        print("warning: the jobs were written after their due time; lag includes the writing")
    env = dict(os.environ)
    for i in range(args.pollers):
        cmd = [sys.executable, str(ROOT / "manage.py"), "runpoller", "--name", f"flow-{i}"]
        cmd += ["--poll-interval", "0.2"]
        _children.append(subprocess.Popen(cmd, cwd=ROOT, env=env))
    deadline = time.monotonic() + args.timeout + lead
    stats: dict = {}
    while time.monotonic() < deadline:
        time.sleep(1.0)
        stats = receiver_stats(args.port)
        done = len(stats["rate_at"]) >= args.rate_jobs and stats["par_n"] >= args.par_jobs
        if done and stats["plain_n"] >= args.plain_jobs:
            break
    pollers_stop(_children)
    report(args, receiver_stats(args.port), total)


def report(args: argparse.Namespace, stats: dict, total: int) -> None:
    from django.db import connection

    arrivals = stats["rate_at"]
    per_second: list[int] = []
    if arrivals:
        start = arrivals[0]
        whole = int(arrivals[-1] - start)  # the last, partial second is left out
        per_second = [0] * max(whole, 1)
        for at in arrivals:
            second = int(at - start)
            if second < whole:
                per_second[second] += 1
    span = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0.0
    within = sum(1 for n in per_second if abs(n - args.rate) <= 0.1 * args.rate)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE status = 'delivered'),"
            " count(*) FILTER (WHERE status NOT IN ('delivered', 'pending')) FROM scheduling_job"
        )
        delivered, gone = cursor.fetchone()
    print(f"limited_key_jobs: {len(arrivals)} of {args.rate_jobs} jobs (limit {args.rate}/s)")
    print(f"limited_key_mean_rate: {(len(arrivals) - 1) / span if span else 0:.1f} jobs/s")
    if per_second:
        print(f"limited_key_rate_min_second: {min(per_second)} jobs/s")
        print(f"limited_key_rate_max_second: {max(per_second)} jobs/s")
        share = within / len(per_second)
        print(f"limited_key_seconds_within_10pct: {within} of {len(per_second)} ({share:.0%})")
        print(f"limited_key_per_second: {' '.join(str(n) for n in per_second)}")
    print(f"narrow_key_jobs: {stats['par_n']} of {args.par_jobs} jobs")
    print(f"narrow_key_most_at_once: {stats['par_most']} (limit {args.parallelism})")
    print(f"unlimited_jobs: {stats['plain_n']} of {args.plain_jobs} jobs")
    print(f"unlimited_lag_p50_seconds: {stats['plain_p50']:.3f} s")
    print(f"unlimited_lag_p99_seconds: {stats['plain_p99']:.3f} s")
    print(f"unlimited_lag_max_seconds: {stats['plain_max']:.3f} s")
    print(f"lost: {total - stats['unique'] + gone} jobs (written back delivered: {delivered})")
    print(f"duplicates: {stats['requests'] - stats['unique']} deliveries")
    print(f"early: {stats['early']} jobs", flush=True)


if __name__ == "__main__":
    sys.exit(main())
