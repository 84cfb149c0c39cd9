"""Fan-out benchmark: what a topic's write-back costs per endpoint request, against the
write-back of as many delivered webhook jobs, same run, in one process.

Usage (from the repository root, PostgreSQL on 127.0.0.1:5432):

    .venv/bin/python bench/fanout.py                     # groups of 110 parents x 10 endpoints
    .venv/bin/python bench/fanout.py --groups 5 --rounds 7

Drops and recreates the database ``sendlater_bench_fanout``; no receiver, no poller
process, nothing sent. It takes every shard's lease as a poller would, then, per
round, writes through ``WriteGroup.write`` (the poller's own write-back, with its
fence) two kinds of group, alternating which goes first:

- (delivered) ``parents x endpoints`` webhook jobs answered delivered: the write a
  single job's delivery costs;
- (fanout) ``parents`` topic jobs of a topic with ``endpoints`` endpoints, answered
  delivered (as ``TopicSink`` answers): each parent marked ``fanned_out`` and its
  children inserted, the write a topic job's delivery costs before its children are
  read and sent.

The jobs are scheduled and read (``ClaimedJob`` from their rows) outside the timing.
Prints per round and kind the CPU microseconds per endpoint request of this process
(the poller's Python) and of its PostgreSQL backend (``/proc``), and
``fanout_over_delivered``: the fan-out's poller + database CPU per request over the
delivered write's; medians over the rounds at the end. A topic's delivery costs its
fan-out on top of what a single job's does (its children are read, sent and written
back as single jobs are), so this is the part of ``bench/topics.py``'s ratio the
fan-out's code decides, measured without the machine's pace between two runs.
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

from bench._cpu import cpu_seconds  # noqa: E402
from bench._webhooks import database_fresh  # noqa: E402


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parents", type=int, default=110, help="topic jobs a group")
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--groups", type=int, default=20, help="groups of each kind a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--database", default="sendlater_bench_fanout")
    return parser.parse_args()


def setup(args: argparse.Namespace) -> None:
    database_fresh(args.server, args.database)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def main() -> None:
    args = parse()
    setup(args)
    from django.db import connection

    from polling.dispatch.base import ClaimedJob, Outcome
    from polling.dispatch.router import Router
    from polling.engine.poller import Poller
    from polling.engine.write_group import WriteGroup
    from scheduling.jobs.services import JobSpec, job_schedule_many
    from scheduling.models import Job, Team
    from scheduling.sharding.clock import db_now
    from scheduling.topics.services import EndpointSpec, topic_put

    team = Team.objects.create(slug="bench-fanout", name="Bench fan-out")
    topic_put(
        team=team,
        name="t",
        endpoints=[
            EndpointSpec(name=f"e{k}", url=f"http://127.0.0.{1 + k % 8}:9/e{k}")
            for k in range(args.endpoints)
        ],
    )
    poller = Poller(
        name="fanout-bench", sink=Router({}), batch_size=100, poll_interval=0.05, sweep_every=3600
    )
    poller.start()
    poller.iterate(now=db_now())  # every shard's lease
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (backend,) = cursor.fetchone()
    requests = args.parents * args.endpoints

    def claimed(kind: str) -> list[ClaimedJob]:
        due = db_now() - timedelta(seconds=1)
        if kind == "fanout":
            specs = [
                JobSpec(due_at=due, target_kind="topic", target="t", payload={"n": n})
                for n in range(args.parents)
            ]
        else:
            specs = [
                JobSpec(
                    due_at=due,
                    target_kind="webhook",
                    target=f"http://127.0.0.{1 + n % 8}:9/e{n % args.endpoints}",
                    payload={"n": n},
                )
                for n in range(requests)
            ]
        ids = [job.id for job, _ in job_schedule_many(team=team, specs=specs)]
        leases = poller.leases
        return [
            ClaimedJob(
                j.id, j.team_id, j.due_at, j.bucket, j.shard, 1, j.target_kind, j.target,
                j.payload, j.metadata, j.expires_at, epoch=leases[j.shard],
                request=j.request, trace_context=j.trace_context,
            )
            for j in Job.objects.filter(id__in=ids).order_by("shard")
        ]  # fmt: skip

    def write(jobs: list[ClaimedJob]) -> tuple[float, float]:
        """This process's and its backend's CPU seconds for the write of ``jobs``."""
        group = WriteGroup(owner=poller.name, group_size=len(jobs), group_seconds=60)
        group.read(jobs)
        started = db_now()
        for job in jobs:
            group.answered(job, Outcome(job.id, "delivered", status_code=200, started_at=started,
                                        duration_seconds=0.001))  # fmt: skip
        out = group.take()
        mine, theirs = time.process_time(), cpu_seconds(backend)
        group.write(out, db_now(), held=set(poller.leases))
        return time.process_time() - mine, cpu_seconds(backend) - theirs

    medians: dict[str, list[float]] = {}
    for number in range(1, args.rounds + 1):
        kinds = ("delivered", "fanout") if number % 2 else ("fanout", "delivered")
        spent: dict[str, list[float]] = {kind: [0.0, 0.0] for kind in kinds}
        for _ in range(args.groups):
            for kind in kinds:
                poller_s, db_s = write(claimed(kind))
                spent[kind][0] += poller_s
                spent[kind][1] += db_s
        per = {
            kind: [1e6 * s / (args.groups * requests) for s in pair] for kind, pair in spent.items()
        }
        for kind in kinds:
            print(
                f"cpu_us_per_request[{kind},round={number}]: poller {per[kind][0]:.1f}"
                f" postgres {per[kind][1]:.1f}"
            )
        ratio = sum(per["fanout"]) / sum(per["delivered"])
        print(f"fanout_over_delivered[round={number}]: {ratio:.3f}")
        for key, value in (
            ("fanout_poller_us", per["fanout"][0]),
            ("fanout_postgres_us", per["fanout"][1]),
            ("delivered_poller_us", per["delivered"][0]),
            ("delivered_postgres_us", per["delivered"][1]),
            ("fanout_over_delivered", ratio),
        ):
            medians.setdefault(key, []).append(value)
    for key, values in medians.items():
        rounds = ", ".join(f"{v:.3f}" if key.endswith("delivered") else f"{v:.1f}" for v in values)
        print(f"{key}_median: {statistics.median(values):.3f} (rounds: {rounds})")
    poller.shutdown()


if __name__ == "__main__":
    main()
