"""Topic benchmark: a topic job with 10 endpoints against ten single jobs, same run.

Usage (from the repository root, PostgreSQL on 127.0.0.1:5432):

    .venv/bin/python bench/topics.py                     # 20,000 topic jobs, 2 pollers
    .venv/bin/python bench/topics.py -n 5000 -p 1

Drops and recreates the database ``sendlater_bench_topics`` and starts one receiver
process: an asyncio HTTP/1.1 server (keep-alive, answers 200) on eight loopback
addresses 127.0.0.1-127.0.0.8 (eight receiving hosts; the topic's ten endpoints are
spread over them). It records, per run, each ``webhook-id``'s first arrival and its
lag behind the due instant (carried in the payload), and the repeats.

Three runs, each with fresh jobs due at one instant and P ``runpoller`` processes
(the real webhook sink), stopped between runs:

- (single) ``10 n`` webhook jobs, ``n`` to each of the ten endpoint URLs;
- (topic) ``n`` jobs naming a topic of those ten endpoints: fanned out at the due
  time, ``10 n`` deliveries;
- (topic+held) as (topic), with the tenth endpoint's delivery key paused before the
  due time: its ``n`` deliveries are written and wait (as a disabled endpoint's do),
  the other nine endpoints' go. The run ends when those nine have every delivery.

Prints ``delivered_per_second[run,P=p]`` (endpoint requests that arrived, over the
due instant to the last arrival), ``ratio_topic_to_single`` (the issue's goal: at least
1 / 1.2), ``lag_p50/p99/max_seconds[run]`` of the nine endpoints never held,
``p99_held_over_topic`` (the goal: within 1.1), and duplicates and missing per run.
Also per run: ``reads`` and ``writebacks`` (statements, and jobs each, from the
pollers' /metrics), and ``cpu_us_per_delivered[run][part]`` read from /proc from the
due instant to the last expected arrival, for the pollers, their transports, the
database's backends and the receiver. ``service_cpu_topic_over_single`` is pollers +
transports + database per endpoint request, topic over single: the machine's pace
moves it less than a rate (not at all only if the pace holds between the runs). It
counts the topic's fan-out (its children written in the run), not the single run's
jobs written before it; ``cpu_us_per_delivered[run][scheduling]`` is that write
(``job_schedule_many``: this process and its backend, per endpoint request), and
``service_cpu_with_scheduling_topic_over_single`` the ratio with it added: what a
team's ten single jobs cost from scheduling to delivery, against one topic job's.
``service_cpu_topic_over_single_receiver_paced`` divides each run's service CPU by
the receiver's (the same work per request in both runs, so it stands for the
machine's pace during each run) before taking the ratio.
``wal_bytes_per_delivered[run]`` is the write-ahead log PostgreSQL wrote over the same
span per endpoint request (the whole server's: the bench is its only writer), and
``wal_bytes_topic_over_single`` its ratio: each commit waits for its log to be flushed.
``chain_single_over_topic`` is the pollers' and the database's CPU per endpoint
request, single over topic: with one poller, whose thread runs its Python and then
waits for each of its statements, that chain bounds the rate, and this ratio is the
rate ratio it predicts (docs/performance.md, "2026-12-07 21:13-21:58 UTC").

``--rounds K`` repeats the three runs K times, single and topic alternating which goes
first, prints each round's ratios (``[P=p,round=r]``) and then each ratio's median over
the rounds (``..._median[P=p]``, with every round's value): the machine's pace moves
within a round, and a median of alternated rounds is the figure to judge a goal by.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._cpu import CpuGroups, children_of, cmdline, service_groups  # noqa: E402
from bench._webhooks import (  # noqa: E402
    pollers_metrics,
    pollers_stop,
    receiver_stats,
    receivers_serve,
    webhook_bench,
)

OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
HOSTS = [f"127.0.0.{i}" for i in range(1, 9)]
ENDPOINTS = 10
HELD = f"e{ENDPOINTS - 1}"  # the endpoint whose deliveries wait in (topic+held)
SERVICE = ("pollers", "transports", "postgres")  # the service's CPU per delivery
_children: list[subprocess.Popen[bytes]] = []


def receiver(port: int) -> None:
    """Serve until killed: note each delivery's first arrival by run and endpoint."""
    # run -> webhook-id -> (endpoint, lag); run -> first and last arrival; repeats.
    seen: dict[str, dict[str, tuple[str, float]]] = {}
    span: dict[str, list[float]] = {}
    repeats: dict[str, int] = {}

    def stats() -> bytes:
        report = {}
        for run, got in seen.items():
            # The lags of the nine endpoints that are never held (in every run alike).
            lags = sorted(lag for endpoint, lag in got.values() if endpoint != HELD)
            at = [
                lags[min(len(lags) - 1, int(q * len(lags)))] if lags else 0.0 for q in (0.5, 0.99)
            ]
            report[run] = {
                "n": len(got),
                "first": span[run][0],
                "last": span[run][1],
                "p50": at[0],
                "p99": at[1],
                "max": lags[-1] if lags else 0.0,
                "repeats": repeats.get(run, 0),
            }
        return json.dumps(report).encode()

    async def answer(line: str, headers: dict[str, str], body: bytes, _local: str) -> bytes:
        now = time.time()
        payload = json.loads(body)["payload"]
        run, endpoint = payload["run"], line.split("e=", 1)[1].split(" ", 1)[0]
        got = seen.setdefault(run, {})
        job_id = headers.get("webhook-id", "")
        if job_id in got:
            repeats[run] = repeats.get(run, 0) + 1
        else:
            got[job_id] = (endpoint, now - payload["due"])
            first_last = span.setdefault(run, [now, now])
            first_last[1] = now
        return OK

    receivers_serve(answer, stats, HOSTS, port)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=20_000, help="topic jobs a run")
    parser.add_argument("-p", "--pollers", type=int, default=2)
    parser.add_argument("--port", type=int, default=8760)
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--database", default="sendlater_bench_topics")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a run")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="rounds of the three runs (single and topic alternate which goes first);"
        " more than one also prints each ratio's median",
    )
    args = parser.parse_args()
    if args.jobs < 1 or args.pollers < 1 or args.rounds < 1:
        parser.error("--jobs >= 1, --pollers >= 1, --rounds >= 1")
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
        run_all(args)
    return 0


def _url(port: int, k: int) -> str:
    return f"http://{HOSTS[k % len(HOSTS)]}:{port}/hook?e=e{k}"


def run_all(args: argparse.Namespace) -> None:
    from scheduling.flow.services import flow_pause_set
    from scheduling.models import Team
    from scheduling.topics.services import EndpointSpec, topic_put

    team, _ = Team.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    team.signing_secret = SECRET
    team.save(update_fields=["signing_secret"])
    endpoints = [EndpointSpec(name=f"e{k}", url=_url(args.port, k)) for k in range(ENDPOINTS)]
    topic_put(team=team, name="t10", endpoints=endpoints)
    topic_put(team=team, name="t10held", endpoints=endpoints)
    flow_pause_set(team=team, key=f"topic:t10held:{HELD}", paused=True)
    tag = f"P={args.pollers}"
    rounds: list[dict[str, float]] = []
    for r in range(args.rounds):
        # Alternate which of single and topic goes first: the machine's pace drifts
        # within minutes, and a drift then favours neither in the medians.
        order = ("single", "topic") if r % 2 == 0 else ("topic", "single")
        results = {}
        for kind in (*order, "topic+held"):
            label = kind if args.rounds == 1 else f"{kind}.{r + 1}"
            results[kind] = got = one_run(args, team, kind, label)
            _print_run(f"{label},{tag}", got)
        ratios = _ratios(results["single"], results["topic"], results["topic+held"])
        suffix = tag if args.rounds == 1 else f"{tag},round={r + 1}"
        for name, value in ratios.items():
            print(f"{name}[{suffix}]: {value:.3f}", flush=True)
        rounds.append(ratios)
    if args.rounds > 1:
        for name in rounds[0]:
            values = [ratios[name] for ratios in rounds]
            listed = ", ".join(f"{value:.3f}" for value in values)
            print(f"{name}_median[{tag}]: {statistics.median(values):.3f} (rounds: {listed})")


def _print_run(tag: str, got: dict) -> None:
    print(f"delivered_per_second[{tag}]: {got['rate']:.0f} requests/s", flush=True)
    for q in ("p50", "p99", "max"):
        print(f"lag_{q}_seconds[{tag}]: {got[q]:.3f} s")
    print(f"duplicates[{tag}]: {got['repeats']}")
    print(f"missing[{tag}]: {got['missing']}")
    for what, (n, jobs) in got["statements"].items():
        print(f"{what}[{tag}]: {n:.0f} statements, {jobs / max(1.0, n):.0f} jobs each")
    for name, spent in got["cpu_us"].items():
        print(f"cpu_us_per_delivered[{tag}][{name}]: {spent:.1f} us")
    print(f"wal_bytes_per_delivered[{tag}]: {got['wal_bytes']:.0f} bytes")


def _ratios(single: dict, topic: dict, held: dict) -> dict[str, float]:
    """One round's figures: topic against single, held against topic."""
    service = [sum(r["cpu_us"][name] for name in SERVICE) for r in (single, topic)]
    # The receiver does the same work for every request in both runs: its CPU a request
    # stands for the machine's pace in each run (which moves by a third within minutes).
    paced = [
        cost / max(r["cpu_us"]["receiver"], 1e-9)
        for cost, r in zip(service, (single, topic), strict=True)
    ]
    whole = [
        service[0] + single["cpu_us"]["scheduling"],
        service[1] + topic["cpu_us"]["scheduling"],
    ]
    return {
        "ratio_topic_to_single": topic["rate"] / max(single["rate"], 1e-9),
        "p99_held_over_topic": held["p99"] / max(topic["p99"], 1e-9),
        "service_cpu_topic_over_single": service[1] / max(service[0], 1e-9),
        "service_cpu_topic_over_single_receiver_paced": paced[1] / max(paced[0], 1e-9),
        "service_cpu_with_scheduling_topic_over_single": whole[1] / max(whole[0], 1e-9),
        "wal_bytes_topic_over_single": topic["wal_bytes"] / max(single["wal_bytes"], 1e-9),
        "chain_single_over_topic": _chain(single) / max(_chain(topic), 1e-9),
    }


def _chain(run: dict) -> float:
    """Pollers + database CPU per endpoint request: with one poller, its thread runs its
    Python and waits for each statement, so this chain's inverse bounds the rate."""
    return run["cpu_us"]["pollers"] + run["cpu_us"]["postgres"]


def one_run(args: argparse.Namespace, team: object, kind: str, run: str) -> dict:
    """One run of ``kind`` (single, topic, topic+held), its deliveries labelled ``run``."""
    from scheduling.jobs.services import JobSpec, job_schedule_many
    from scheduling.sharding.clock import db_now

    single = kind == "single"
    deliveries = args.jobs * ENDPOINTS
    due = db_now() + timedelta(seconds=8 + deliveries / 15_000)
    payload = {"run": run, "due": due.timestamp()}
    if single:
        specs = [
            JobSpec(
                due_at=due,
                target_kind="webhook",
                target=_url(args.port, i % ENDPOINTS),
                payload=payload,
            )
            for i in range(deliveries)
        ]
    else:
        topic = "t10" if kind == "topic" else "t10held"
        specs = [
            JobSpec(due_at=due, target_kind="topic", target=topic, payload=payload)
            for _ in range(args.jobs)
        ]
    writing = CpuGroups({"scheduling": _own_pids})
    writing.start()
    for start in range(0, len(specs), 10_000):
        job_schedule_many(team=team, specs=specs[start : start + 10_000])
    scheduled = writing.stop()["scheduling"]
    ports = [args.port + 100 + i for i in range(args.pollers)]
    for i in range(args.pollers):
        cmd = [sys.executable, str(ROOT / "manage.py"), "runpoller", "--name", f"tp-{run}-{i}"]
        cmd += ["--metrics-port", str(ports[i])]
        _children.append(subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ)))
    poller_pids = [child.pid for child in _children]
    cpu = CpuGroups(service_groups(poller_pids, _receiver_pids))
    time.sleep(max(0.0, due.timestamp() - time.time()))  # CPU from the due instant on
    cpu.start()
    wal_from = _wal_lsn()
    expected = deliveries - (args.jobs if kind == "topic+held" else 0)
    deadline = time.monotonic() + args.timeout
    got: dict = {}
    while time.monotonic() < deadline:
        time.sleep(0.5)
        got = receiver_stats(args.port).get(run, {})
        if got.get("n", 0) >= expected:
            break
    seconds = cpu.stop()  # before the pollers end (their backends' CPU goes with them)
    wal = _wal_bytes_since(wal_from)
    time.sleep(2.0)  # repeats still on their way
    scraped = pollers_metrics(ports)
    pollers_stop(_children)
    got = receiver_stats(args.port).get(run, {})
    span = max(got.get("last", 0.0) - due.timestamp(), 1e-9)
    return {
        "rate": got.get("n", 0) / span,
        "p50": got.get("p50", 0.0),
        "p99": got.get("p99", 0.0),
        "max": got.get("max", 0.0),
        "repeats": got.get("repeats", 0),
        "missing": expected - got.get("n", 0),
        "statements": {
            "reads": (scraped["claims"], scraped["claimed"]),
            "writebacks": (scraped["groups"], scraped["grouped"]),
        },
        "wal_bytes": wal / max(1, got.get("n", 0)),
        "cpu_us": {
            name: spent * 1e6 / max(1, got.get("n", 0))
            for name, spent in {**seconds, "scheduling": scheduled}.items()
        },
    }


def _wal_lsn() -> str:
    """PostgreSQL's write-ahead log position now (the whole server's: the bench is alone)."""
    from polling.common.sql import fetch_all

    return fetch_all("SELECT pg_current_wal_lsn()::text", [])[0][0]


def _wal_bytes_since(lsn: str) -> float:
    """Bytes of write-ahead log written since ``lsn``: what each commit waits to flush."""
    from polling.common.sql import fetch_all

    sql = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)"
    return float(fetch_all(sql, [lsn])[0][0])


def _own_pids() -> list[int]:
    """This process and its database backend (where ``job_schedule_many`` runs)."""
    from polling.common.sql import fetch_all

    return [os.getpid(), fetch_all("SELECT pg_backend_pid()", [])[0][0]]


def _receiver_pids() -> list[int]:
    """The receiver: this process's spawned child (the pollers are not spawned)."""
    return [pid for pid in children_of(os.getpid()) if "spawn_main" in cmdline(pid)]


if __name__ == "__main__":
    sys.exit(main())
