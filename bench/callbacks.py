"""Callback benchmark: how soon after a job's outcome its callback reaches the caller.

Usage (from the repository root, PostgreSQL on 127.0.0.1:5432):

    .venv/bin/python bench/callbacks.py                    # 20,000 jobs over 20 s, 1 poller
    .venv/bin/python bench/callbacks.py -n 50000 --spread 0 -p 2

Drops and recreates the database ``sendlater_bench_callbacks`` and starts one receiver
process (asyncio HTTP/1.1, keep-alive) on 127.0.0.1: ``/hook`` answers 200, ``/fail``
answers 500, ``/cb`` takes the callbacks. Half the jobs go to ``/hook`` with an
``on_success_url``, half to ``/fail`` with ``retry: {max_attempts: 1}`` and an
``on_failure_url`` (they end ``dead`` on their first try). The jobs are due evenly over
``--spread`` seconds (0: all at one instant, a burst), run by ``-p`` pollers (with
the receiving host's circuit breaker out of the way: half its answers fail on purpose).

The receiver notes when each job's request was answered and when its callback
arrived (the event's ``job_id``). The callback's lag is the difference: an upper
bound of the time from the outcome (written after the answer) to its callback.
Prints ``callback_lag_p50/p99/max_seconds[event]``, callbacks missing and repeated,
and the poll interval the pollers ran with, for scale.
"""

from __future__ import annotations

import argparse
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

OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
FAIL = b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\nfail"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
_children: list[subprocess.Popen[bytes]] = []


def receiver(port: int) -> None:
    """Serve until killed: /hook and /fail note the answer's time, /cb the callback's."""
    answered: dict[str, float] = {}  # job id -> when its request was answered
    called: dict[str, list[float]] = {}  # event type -> lag of each first callback
    seen: set[str] = set()
    counts = {"callbacks": 0}

    def stats() -> bytes:
        report: dict = {"answered": len(answered), "callbacks": counts["callbacks"]}
        for event, lags in called.items():
            lags.sort()
            at = [lags[min(len(lags) - 1, int(q * len(lags)))] for q in (0.5, 0.99)]
            report[event] = {"n": len(lags), "p50": at[0], "p99": at[1], "max": lags[-1]}
        return json.dumps(report).encode()

    async def answer(line: str, headers: dict[str, str], body: bytes, _local: str) -> bytes:
        if line.startswith("POST /cb"):
            now = time.time()
            event = json.loads(body)
            counts["callbacks"] += 1
            job_id = event["job_id"]
            if job_id not in seen and job_id in answered:
                seen.add(job_id)
                called.setdefault(event["type"], []).append(now - answered[job_id])
            return OK
        job_id = headers.get("webhook-id", "")  # the job's id
        answered.setdefault(job_id, time.time())
        return FAIL if line.startswith("POST /fail") else OK

    receivers_serve(answer, stats, ["127.0.0.1"], port)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=20_000)
    parser.add_argument("--spread", type=float, default=20.0, help="seconds (0: a burst)")
    parser.add_argument("-p", "--pollers", type=int, default=1)
    parser.add_argument("--poll-interval", type=float, default=0.2)
    parser.add_argument("--port", type=int, default=8750)
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--database", default="sendlater_bench_callbacks")
    parser.add_argument("--timeout", type=float, default=600, help="seconds")
    args = parser.parse_args()
    if args.jobs < 2 or args.pollers < 1 or args.spread < 0 or args.poll_interval <= 0:
        parser.error("--jobs >= 2, --pollers >= 1, --spread >= 0, --poll-interval > 0")
    return args


def main() -> int:
    args = parse()
    with webhook_bench(
        server=args.server,
        database=args.database,
        receiver=receiver,
        receiver_args=(args.port,),
        children=_children,
    ):
        run(args)
    return 0


def run(args: argparse.Namespace) -> None:
    from scheduling.jobs.requests import DeliveryRequest, RetryPolicy
    from scheduling.jobs.services import JobSpec, job_schedule_many
    from scheduling.models import Team
    from scheduling.sharding.clock import db_now

    team, _ = Team.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    team.signing_secret = SECRET
    team.save(update_fields=["signing_secret"])
    base = f"http://127.0.0.1:{args.port}"
    on_success = DeliveryRequest(on_success_url=f"{base}/cb")
    on_failure = DeliveryRequest(on_failure_url=f"{base}/cb", retry=RetryPolicy(max_attempts=1))
    first = db_now() + timedelta(seconds=8 + args.jobs / 15_000)
    for offset in range(0, args.jobs, 10_000):
        specs = []
        for i in range(offset, min(args.jobs, offset + 10_000)):
            fails = i % 2 == 1
            specs.append(
                JobSpec(
                    due_at=first + timedelta(seconds=args.spread * i / args.jobs),
                    target_kind="webhook",
                    target=f"{base}/fail" if fails else f"{base}/hook",
                    payload={"i": i},
                    request=on_failure if fails else on_success,
                )
            )
        job_schedule_many(team=team, specs=specs)
    for i in range(args.pollers):
        cmd = [sys.executable, str(ROOT / "manage.py"), "runpoller", "--name", f"cb-{i}"]
        cmd += ["--poll-interval", str(args.poll_interval)]
        _children.append(subprocess.Popen(cmd, cwd=ROOT, env=_poller_env()))
    deadline = time.monotonic() + args.timeout
    stats: dict = {}
    while time.monotonic() < deadline:
        time.sleep(1.0)
        stats = receiver_stats(args.port)
        done = sum(stats.get(e, {}).get("n", 0) for e in ("job.delivered", "job.dead"))
        if done >= args.jobs:
            break
    time.sleep(2.0)  # repeats still on their way
    pollers_stop(_children)
    stats = receiver_stats(args.port)
    tag = f"[n={args.jobs},spread={args.spread:g}s,P={args.pollers}]"
    print(f"poll_interval_seconds{tag}: {args.poll_interval:g} s")
    print(f"jobs_answered{tag}: {stats['answered']} jobs")
    heard = 0
    for event in ("job.delivered", "job.dead"):
        got = stats.get(event, {"n": 0, "p50": 0.0, "p99": 0.0, "max": 0.0})
        heard += got["n"]
        asked = (args.jobs + (event == "job.delivered")) // 2  # even i succeed, odd fail
        print(f"callbacks{tag}[{event}]: {got['n']} of {asked}")
        for q in ("p50", "p99", "max"):
            print(f"callback_lag_{q}_seconds{tag}[{event}]: {got[q]:.3f} s")
    print(f"callbacks_missing{tag}: {args.jobs - heard} jobs")
    print(f"callbacks_repeated{tag}: {stats['callbacks'] - heard} callbacks", flush=True)


def _poller_env() -> dict[str, str]:
    """The pollers' environment: half the jobs fail on purpose, at the one receiving
    host the callbacks go to as well; the host's circuit breaker would open after
    SENDLATER_BREAKER_FAILURES of them and hold back (or fail unsent) the rest, the
    callbacks included. So it is set out of the way unless given."""
    env = dict(os.environ)
    env.setdefault("SENDLATER_BREAKER_FAILURES", "1000000")
    return env


if __name__ == "__main__":
    sys.exit(main())
