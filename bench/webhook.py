"""Webhook benchmark: real webhook deliveries by P pollers, against a raw reference.

Usage (from the repository root, PostgreSQL on 127.0.0.1:5432):

    .venv/bin/python bench/webhook.py                          # every shape, full size
    .venv/bin/python bench/webhook.py --shapes b -p 1,2 --backlog 100000
    .venv/bin/python bench/webhook.py --shapes a -n 200000

Drops and recreates the database ``sendlater_bench_webhook`` and starts one
receiver process: a minimal asyncio HTTP/1.1 server (keep-alive, answers 200) on
127.0.0.1 and on eight more loopback addresses 127.0.0.2-127.0.0.9 (eight
"customers"; ``SENDLATER_CALLBACK_ALLOWLIST=127.0.0.0/8``), where 127.0.0.9 answers
only after ``--slow-seconds`` (5) in shape (c). It records, per ``webhook-id``, the
first arrival and its lag behind the job's due time (carried in the payload), and
counts repeats (duplicates) and arrivals before the due time (early).

First, the **raw reference**: a plain asyncio client (request bytes written by
hand, the same Standard Webhooks signing, a fresh id each, 32 keep-alive
connections, no database) sends ``--raw-requests`` POSTs to the same receiver, on
one address and spread over the eight. Then the shapes, each with fresh jobs
scheduled through ``job_schedule_many`` and P ``runpoller`` processes with the real
webhook sink:

- (a) ``-n`` (1,000,000) webhooks due evenly over one minute, 2 pollers, one receiver;
- (b) ``--backlog`` (300,000) due at one instant, 1 and 2 pollers, one receiver;
- (c) as (b) over the eight receivers, one of them slow: the run ends when the seven
  fast receivers have every job; the slow one's jobs wait their turn (pending).
  It also prints the fast receivers' drain time (due instant to last arrival) and
  their p99 lag against it.

Prints ``name[shape,P=p]: value unit`` lines: delivered_per_second, lag_p50/p99/max
(seconds, at the receiver), lost, duplicates, early, poller_peak_rss_mb and
ratio_to_raw (delivered_per_second over the raw reference's requests/s),
deferral_writes (deferred outcomes written back, from the pollers' metrics), claims
and writebacks (statements, and jobs per statement, from the same metrics) and
cpu_us_per_delivered for the pollers, their transport processes, the database's
backends and the receiver (read from /proc from the due instant to the end of the
run); for the raw reference, raw_cpu_us_per_request of the client and of the
receiver under it. After each run the raw reference is measured again on that run's
receivers (``[..., after]``), and the run is judged against the mean of the measures
just before and just after it (the machine's pace moves within minutes):
ratio_to_raw_bracketed, service_cpu_over_raw_client (pollers + transports + database
per delivered job over the raw client's CPU a request) and receiver_cpu_over_raw.
Everything it starts is stopped and the database is dropped.

``--contract``: each run of (b) and (c) is followed by one whose jobs carry the
delivery contract's commonest shape (``[b+contract,P=p]``): three custom headers
(encrypted at rest, opened per delivery) and ``format: payload`` (the payload alone as
the body), for its cost per job against the default shape in the same run.

``--traced``: tracing on in the pollers (docs/operations.md, "Traces": OTLP over HTTP,
the batch span processor, every span sampled) and every job created with a trace
context of its own, as if each came from a traced request; the spans go to a
minimal collector process (``--port`` + 50) that counts them
(``spans_exported[...]``, and ``collector_cpu_us_per_delivered``, not counted in
the pollers'). Alternate runs with and without it for tracing's cost per job.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._cpu import CpuGroups, children_of, cmdline, service_groups  # noqa: E402
from bench._otlp_collector import collector_serve  # noqa: E402
from bench._webhook_raw import SECRET, Raw, raw_rate  # noqa: E402
from bench._webhook_receiver import FAST_HOSTS, SLOW_HOST, receiver  # noqa: E402
from bench._webhooks import (  # noqa: E402
    pollers_metrics,
    pollers_stop,
    receiver_reset,
    receiver_stats,
    webhook_bench,
)
from bench.burst import peak_rss_mb  # noqa: E402

ONE, SEVEN = "one receiver", "seven receivers"  # the raw reference's two measures
RAW_HOSTS = {ONE: ["127.0.0.1"], SEVEN: FAST_HOSTS}
_children: list[subprocess.Popen[bytes]] = []
_collector: list[int] = []  # the OTLP collector's pid (--traced)
_raw: dict[str, Raw] = {}  # the latest measure of each raw reference (ONE, SEVEN)


def receiver_pids() -> list[int]:
    """The receiver: this process's spawned child that is not a poller (nor the collector)."""
    pollers = {child.pid for child in _children} | set(_collector)
    return [
        pid
        for pid in children_of(os.getpid())
        if pid not in pollers and "spawn_main" in cmdline(pid)
    ]


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="a,b,c", help="comma-separated: a, b, c")
    parser.add_argument("-n", "--jobs", type=int, default=1_000_000, help="shape (a)")
    parser.add_argument("--backlog", type=int, default=300_000, help="shapes (b) and (c)")
    parser.add_argument("-p", "--pollers", default="1,2", help="for (b) and (c); (a) uses 2")
    parser.add_argument("--raw-requests", type=int, default=100_000)
    parser.add_argument("--slow-seconds", type=float, default=5.0)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--port", type=int, default=8650)
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--database", default="sendlater_bench_webhook")
    parser.add_argument("--timeout", type=float, default=900, help="per run (s)")
    parser.add_argument(
        "--traced", action="store_true", help="tracing on in the pollers, a context per job"
    )
    parser.add_argument(
        "--contract",
        action="store_true",
        help="(b) and (c) again with three custom headers and format payload on every job",
    )
    args = parser.parse_args()
    if min(args.jobs, args.backlog, args.raw_requests, args.batch_size) < 1:
        parser.error("--jobs, --backlog, --raw-requests and --batch-size must be positive")
    if not set(args.shapes.split(",")) <= {"a", "b", "c"}:
        parser.error("--shapes takes a, b and c")
    return args


def main() -> int:
    args = parse()
    with webhook_bench(
        server=args.server,
        database=args.database,
        receiver=receiver,
        receiver_args=(args.port, args.slow_seconds),
        children=_children,
    ):
        if args.traced:
            collector = mp.get_context("spawn").Process(
                target=collector_serve, args=(args.port + 50,), daemon=True
            )
            collector.start()
            _collector.append(collector.pid)
        time.sleep(0.5)
        for tag, hosts in RAW_HOSTS.items():
            _raw[tag] = raw_rate(hosts, args.port, args.raw_requests, tag, receiver_pids)
            print(f"raw_requests_per_second[{tag}]: {_raw[tag].rate:.0f} req/s")
        counts = [int(p) for p in args.pollers.split(",")]
        shapes = args.shapes.split(",")
        if "a" in shapes:
            run(args, "a", 2, jobs=args.jobs, spread=59.9, hosts=["127.0.0.1"], raw=ONE)
        for shape, hosts, raw in (
            ("b", ["127.0.0.1"], ONE),
            ("c", [*FAST_HOSTS, SLOW_HOST], SEVEN),
        ):
            if shape in shapes:
                for pollers in counts:
                    for label in [shape, *([f"{shape}+contract"] if args.contract else [])]:
                        run(
                            args,
                            label,
                            pollers,
                            jobs=args.backlog,
                            spread=0.0,
                            hosts=hosts,
                            raw=raw,
                        )
    return 0


def run(
    args: argparse.Namespace,
    shape: str,
    pollers: int,
    *,
    jobs: int,
    spread: float,
    hosts: list[str],
    raw: str,
) -> None:
    """One run of ``shape`` with ``pollers``; ``raw`` names its raw reference, measured
    again after it (``_raw`` keeps the latest of each)."""
    from django.db import connection

    from scheduling import keys
    from scheduling.jobs.services import JobSpec, job_schedule_many
    from scheduling.models import Team
    from scheduling.sharding.buckets import forget_cached_counts
    from scheduling.sharding.clock import db_now

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scheduling_job, scheduling_bucket, scheduling_deliveryattempt,"
            " polling_poller, polling_shardlease, polling_shardcheckpoint"
        )
    forget_cached_counts()  # the buckets recorded by the last run are gone
    receiver_reset(args.port)
    team, _ = Team.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    team.signing_secret = SECRET
    team.save(update_fields=["signing_secret"])
    lead = 10 + jobs / 15_000  # time to write the jobs and start the pollers
    first = keys.bucket_end(keys.bucket_of(db_now() + timedelta(seconds=lead), 60), 60)
    if spread == 0:
        first = db_now() + timedelta(seconds=lead)
    urls = [f"http://{host}:{args.port}/hook" for host in hosts]
    fast = sum(not url.startswith(f"http://{SLOW_HOST}:") for url in urls)
    request = contract_request() if shape.endswith("+contract") else None
    chunk = 10_000
    for offset in range(0, jobs, chunk):
        specs = []
        for i in range(offset, min(jobs, offset + chunk)):
            due = first + timedelta(seconds=spread * i / jobs)
            payload = {"i": i, "d": due.timestamp()}
            specs.append(
                JobSpec(
                    due_at=due,
                    target_kind="webhook",
                    target=urls[i % len(urls)],
                    payload=payload,
                    request=request,
                    trace_context=f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
                    if args.traced
                    else None,
                )
            )
        job_schedule_many(team=team, specs=specs)
    expected_fast = sum(1 for i in range(jobs) if i % len(urls) < fast)
    env = dict(os.environ)
    if args.traced:
        env.update(
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{args.port + 50}",
            OTEL_TRACES_SAMPLER="parentbased_always_on",
            OTEL_SERVICE_NAME="sendlater-bench",
        )
        receiver_reset(args.port + 50)
    metrics_ports = [args.port + 100 + i for i in range(pollers)]
    for i in range(pollers):
        cmd = [sys.executable, str(ROOT / "manage.py"), "runpoller", "--name", f"wh-{shape}-{i}"]
        cmd += ["--batch-size", str(args.batch_size), "--poll-interval", "0.2"]
        cmd += ["--metrics-port", str(metrics_ports[i])]
        _children.append(subprocess.Popen(cmd, cwd=ROOT, env=env))
    poller_pids = [child.pid for child in _children]
    cpu = CpuGroups(
        {
            **service_groups(poller_pids, receiver_pids),
            **({"collector": collector_pids} if args.traced else {}),
        }
    )
    time.sleep(max(0.0, first.timestamp() - time.time()))  # CPU from the due instant on
    cpu.start()
    received = receiver_stats(args.port).get("unique", 0)
    deadline = time.monotonic() + args.timeout + lead
    stats: dict = {}
    while time.monotonic() < deadline:
        time.sleep(1.0)
        stats = receiver_stats(args.port)
        if stats.get("fast", {}).get("n", 0) >= expected_fast:
            break
    seconds = cpu.stop()
    sent = stats.get("unique", 0) - received
    scraped = pollers_metrics(metrics_ports)
    deferred = int(scraped["deferred"])
    rss = max(peak_rss_mb(child.pid) for child in _children)
    pollers_stop(_children)
    stats = receiver_stats(args.port)
    before = _raw[raw]
    rate = report(shape, pollers, jobs, expected_fast, first, stats, rss, before.rate)
    tag = f"[{shape},P={pollers}]"
    share = deferred / max(1, stats.get("unique", 0))
    print(f"deferral_writes{tag}: {deferred} jobs ({share:.2%} of delivered)")
    for what, count, total in (
        ("claims", "claims", "claimed"),
        ("writebacks", "groups", "grouped"),
    ):
        n = scraped[count]
        print(f"{what}{tag}: {n:.0f} statements, {scraped[total] / max(1.0, n):.0f} jobs each")
    for name, spent in seconds.items():
        print(f"cpu_us_per_delivered{tag}[{name}]: {spent * 1e6 / max(1, sent):.1f} us")
    # The raw reference again, right after: the machine's pace moves within minutes, so
    # the run is judged against the mean of the measures just before and just after it.
    after = _raw[raw] = raw_rate(
        RAW_HOSTS[raw], args.port, args.raw_requests, f"{raw}, after", receiver_pids
    )
    bracket = [before, after]
    print(f"raw_requests_per_second_after{tag}: {after.rate:.0f} req/s")
    mean_rate = sum(r.rate for r in bracket) / 2
    print(f"ratio_to_raw_bracketed{tag}: {rate / mean_rate:.2f}")
    service = sum(seconds[name] for name in ("pollers", "transports", "postgres"))
    service_us = service * 1e6 / max(1, sent)
    client_us = sum(r.client_us for r in bracket) / 2
    print(f"service_cpu_over_raw_client{tag}: {service_us / client_us:.2f}")
    receiver_us = sum(r.receiver_us for r in bracket) / 2
    print(
        f"receiver_cpu_over_raw{tag}: {seconds['receiver'] * 1e6 / max(1, sent) / receiver_us:.2f}"
    )
    if args.traced:
        time.sleep(6)  # the batch span processors' last export (every 5 s)
        exported = receiver_stats(args.port + 50)
        print(f"spans_exported{tag}: {exported['spans']} spans in {exported['requests']} requests")


def contract_request() -> object:
    """``--contract``: three custom headers (sealed at rest) and the payload alone."""
    from scheduling.jobs.requests import DeliveryRequest

    headers = {
        "Authorization": "Bearer bench-0123456789abcdef0123456789abcdef",
        "X-Tenant": "acme-corp",
        "X-Request-Source": "sendlater-bench",
    }
    return DeliveryRequest(headers=headers, format="payload")


def collector_pids() -> list[int]:
    return list(_collector)


def report(
    shape: str,
    pollers: int,
    jobs: int,
    expected_fast: int,
    first: datetime,
    stats: dict,
    rss: float,
    raw: float,
) -> float:
    """Print the run's delivery figures; return its rate (jobs/s)."""
    from django.db import connection

    tag = f"[{shape},P={pollers}]"
    fast = stats.get("fast", {"n": 0, "p50": 0, "p99": 0, "max": 0})
    slow = stats.get("slow", {"n": 0, "p50": 0, "p99": 0, "max": 0})
    # The fast receivers' own drain: in (c) the slow one goes on receiving (a request
    # each 5 s a connection) until the pollers stop, after the fast ones are done.
    span = fast.get("last_at", 0.0) - first.timestamp() if fast["n"] else 0.0
    rate = fast["n"] / span if span > 0 else 0.0
    with connection.cursor() as cursor:
        # Lost: jobs that are neither delivered nor still waiting their turn (pending).
        cursor.execute(
            "SELECT count(*) FILTER (WHERE status NOT IN ('delivered', 'pending')),"
            " count(*) FILTER (WHERE status = 'delivered') FROM scheduling_job"
        )
        gone, delivered = cursor.fetchone()
    print(f"jobs{tag}: {jobs} count")
    print(f"delivered_per_second{tag}: {rate:.0f} jobs/s")
    print(f"lag_p50_seconds{tag}: {fast['p50']:.3f} s")
    print(f"lag_p99_seconds{tag}: {fast['p99']:.3f} s")
    print(f"lag_max_seconds{tag}: {fast['max']:.3f} s")
    print(f"lost{tag}: {expected_fast - fast['n'] + gone} jobs")
    print(f"duplicates{tag}: {stats['requests'] - stats['unique']} deliveries")
    print(f"early{tag}: {stats['early']} jobs")
    print(f"poller_peak_rss_mb{tag}: {rss:.0f} MiB")
    print(f"ratio_to_raw{tag}: {rate / raw:.2f}")
    if slow["n"] or shape.startswith("c"):
        print(f"slow_receiver_delivered{tag}: {slow['n']} jobs (the rest wait, pending)")
        print(f"slow_receiver_lag_p50_seconds{tag}: {slow['p50']:.3f} s")
        # The goal: the fast receivers' p99 lag within their own drain time + 2 s.
        print(f"fast_drain_seconds{tag}: {span:.3f} s")
        print(f"fast_lag_p99_over_drain_seconds{tag}: {fast['p99'] - span:+.3f} s")
    print(f"written_back_delivered{tag}: {delivered} jobs", flush=True)
    return rate


if __name__ == "__main__":
    sys.exit(main())
