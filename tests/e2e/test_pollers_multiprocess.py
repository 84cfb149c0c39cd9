"""Several ``runpoller`` processes on PostgreSQL: sharing, crashes, pauses, scale-out.

Subprocesses use a 3 s lease and a 0.2 s poll interval so the whole module takes
about two minutes. Delivery counts come from the ``record`` handler's log (one line
per delivery) and from SQL over the jobs table.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.db import connection

from polling.models import ShardLease
from polling.ownership.assignment import assignment
from scheduling.jobs.inflight import WINDOW_LOCK_CLASS, ids_parse
from scheduling.jobs.services import JobSpec, job_schedule_many
from scheduling.models import InFlightBatch, Job
from scheduling.sharding.clock import db_now
from tests.support.factories import team_create
from tests.support.procs import POLLER_PROCESSES, ROOT, child_env
from tests.support.recording import deliveries

pytestmark = POLLER_PROCESSES

LEASE = 3.0
POLL = 0.2


@pytest.fixture
def procs(tmp_path):
    """Start runpoller processes; every one still alive is killed at teardown."""
    started: list[subprocess.Popen] = []

    def start(
        name: str, *args: str, handler_sleep: float = 1.0, failpoints: str = ""
    ) -> subprocess.Popen:
        extra = {"SENDLATER_FAILPOINTS": failpoints} if failpoints else {}
        env = child_env(
            **extra,
            SENDLATER_LEASE_SECONDS=str(int(LEASE)),
            SENDLATER_POLL_INTERVAL_SECONDS=str(POLL),
            SENDLATER_SWEEP_SECONDS="2",
            SENDLATER_SHUTDOWN_GRACE_SECONDS="20",
            SENDLATER_HANDLER_MODULES="tests.support.recording",
            SENDLATER_TEST_RECORD_DIR=str(tmp_path),
            SENDLATER_TEST_SLOW_SECONDS=str(handler_sleep),
            SENDLATER_DB_POOL="false",
        )
        log = open(tmp_path / f"{name}.stderr", "w")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "runpoller", "--name", name, *args],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def schedule(n: int, *, start_in: float, over: float, handler: str = "record") -> datetime:
    team = team_create(slug=f"t{time.monotonic_ns()}")
    first = db_now() + timedelta(seconds=start_in)
    specs = [
        JobSpec(
            due_at=first + timedelta(seconds=over * i / n),
            target_kind="handler",
            target=handler,
            payload={"i": i},
        )
        for i in range(n)
    ]
    for chunk in range(0, n, 5000):
        job_schedule_many(team=team, specs=specs[chunk : chunk + 5000])
    return first


def wait_for(predicate, timeout: float, what: str, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def sql(query: str, params=()):
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall()


def assert_all_delivered_never_early(n: int) -> None:
    (row,) = sql(
        "SELECT count(*) FILTER (WHERE status = 'delivered'),"
        " count(*) FILTER (WHERE status = 'pending'),"
        " count(*) FILTER (WHERE delivered_at < due_at) FROM scheduling_job"
    )
    assert row == (n, 0, 0)


def due_times() -> dict[str, float]:
    return {str(i): d.timestamp() for i, d in Job.objects.values_list("id", "due_at")}


def stop_all(procs_: list[subprocess.Popen]) -> None:
    for proc in procs_:
        proc.send_signal(signal.SIGTERM)
    for proc in procs_:
        assert proc.wait(timeout=15) == 0
    assert not ShardLease.objects.filter(owner__isnull=False).exists()


def owners() -> dict[int, str | None]:
    return dict(ShardLease.objects.values_list("shard", "owner"))


def test_three_pollers_deliver_20000_jobs_exactly_once_never_early(procs, tmp_path) -> None:
    n = 20_000
    schedule(n, start_in=6, over=30)
    pollers = [procs(f"p{i}", "--batch-size", "500", "--concurrency", "4") for i in range(3)]
    wait_for(lambda: Job.objects.filter(status="delivered").count() == n, 90, "all delivered")
    assert_all_delivered_never_early(n)
    assert Job.objects.exclude(attempts=1).count() == 0
    log = deliveries(tmp_path)
    assert len(log) == n and len({job_id for job_id, *_ in log}) == n
    dues = due_times()
    assert all(at >= dues[job_id] for job_id, _, at, _ in log)
    assert len({pid for *_, pid in log}) == 3  # the work really was shared
    stop_all(pollers)


def test_kill_9_shards_taken_over_within_lease_nothing_lost(procs, tmp_path) -> None:
    n, batch = 6000, 100
    schedule(n, start_in=4, over=15)
    pollers = [procs(f"k{i}", "--batch-size", str(batch)) for i in range(3)]
    wait_for(lambda: Job.objects.filter(status="delivered").count() > n // 4, 60, "progress")
    victim = pollers[0]
    held = {
        s: e for s, o, e in ShardLease.objects.values_list("shard", "owner", "epoch") if o == "k0"
    }
    assert held
    victim.kill()
    killed_at = time.monotonic()
    victim.wait(timeout=5)

    def taken_over() -> bool:
        rows = ShardLease.objects.filter(shard__in=held).values_list("shard", "owner", "epoch")
        return all(o in ("k1", "k2") and e > held[s] for s, o, e in rows)

    wait_for(taken_over, LEASE + POLL + 5, "takeover", step=0.05)
    took = time.monotonic() - killed_at
    assert took <= LEASE + POLL + 1.0, f"takeover took {took:.2f}s"
    wait_for(lambda: Job.objects.filter(status="delivered").count() == n, 60, "all delivered")
    assert_all_delivered_never_early(n)
    log = deliveries(tmp_path)
    assert {job_id for job_id, *_ in log} == set(due_times())  # nothing lost
    assert len(log) - n <= batch  # duplicates: at most the victim's in-flight batch
    stop_all(pollers[1:])


def test_sigstop_past_lease_fenced_writes_change_nothing(procs, tmp_path) -> None:
    schedule(10, start_in=-1, over=0.5, handler="slow_record")
    a = procs("a", "--once", "--batch-size", "5", "--concurrency", "10", handler_sleep=2.0)

    def a_read_all() -> list:
        found = list(
            InFlightBatch.objects.filter(owner="a").values_list("job_ids", "shard", "epoch")
        )
        return found if sum(len(ids_parse(text)) for text, _, _ in found) == 10 else []

    # All ten read (each batch's transaction committed): a is stopped while its
    # deliveries are under way, not inside a read (the next test stops it there).
    batches = wait_for(a_read_all, 30, "a's reads", step=0.02)
    a.send_signal(signal.SIGSTOP)
    try:
        ids = [i for text, _, _ in batches for i in ids_parse(text)]
        a_epoch = {s: e for _, s, e in batches}
        b = procs("b", "--batch-size", "5", "--concurrency", "5", handler_sleep=0.1)

        def b_delivered_them() -> bool:
            rows = Job.objects.filter(id__in=ids).values_list("status", flat=True)
            return set(rows) == {"delivered"}

        wait_for(b_delivered_them, 30, "b to take over and deliver a's rows in flight")
        leases = dict(ShardLease.objects.filter(shard__in=a_epoch).values_list("shard", "epoch"))
        assert all(leases[s] > e for s, e in a_epoch.items())
        fields = ("id", "status", "attempts", "delivered_at", "updated_at", "last_attempt_at")
        before = sorted(Job.objects.filter(id__in=ids).values_list(*fields))
    finally:
        a.send_signal(signal.SIGCONT)
    assert a.wait(timeout=30) == 0  # finishes its batch, writes back (fenced), exits
    after = sorted(Job.objects.filter(id__in=ids).values_list(*fields))
    assert after == before
    assert {attempts for _, _, attempts, *_ in after} == {1}  # b's one write, a's refused
    assert "fenced out" in (tmp_path / "a.stderr").read_text()
    wait_for(lambda: Job.objects.filter(status="delivered").count() == 10, 30, "all delivered")
    assert not InFlightBatch.objects.filter(owner="a").exists()  # b forgot them
    stop_all([b])


def process_stopped(proc: subprocess.Popen) -> bool:
    """The process is stopped (state ``T`` in /proc)."""
    stat = Path(f"/proc/{proc.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def test_poller_stopped_inside_a_read_holds_no_one_up(procs, tmp_path) -> None:
    """A poller stopped while it holds a shard's window lock (inside ``batch_take``'s
    transaction): PostgreSQL ends its session after a lease idle in the transaction
    (``polling.ownership.stall_bounds``), so the next owner reads and delivers that shard's jobs
    while the stopped process is still stopped; waking, the stopped poller writes
    nothing (its connection is gone) and exits cleanly."""
    schedule(10, start_in=-1, over=0.5)
    a = procs("a", "--once", "--batch-size", "5", failpoints="take_locked=once-stop")
    wait_for(lambda: process_stopped(a), 30, "a to stop itself inside its first read")
    stopped_at = time.monotonic()
    try:
        held = sql(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s"
            " AND mode = 'ExclusiveLock' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [WINDOW_LOCK_CLASS],
        )
        assert held == [(1,)]  # a holds one shard's window
        b = procs("b", "--batch-size", "5")
        wait_for(
            lambda: Job.objects.filter(status="delivered").count() == 10,
            LEASE * 2 + 20,
            "b to deliver every job while a is stopped",
        )
        took = time.monotonic() - stopped_at
        # a's leases expire, b takes them over, a's session ends after a lease idle in
        # its transaction; the slack covers b's start (Django set-up) on a busy machine.
        assert took < LEASE * 2 + 15, f"delivered {took:.1f}s after a stopped"
        assert process_stopped(a)
    finally:
        a.send_signal(signal.SIGCONT)
    assert a.wait(timeout=30) == 0
    assert_all_delivered_never_early(10)
    assert Job.objects.exclude(attempts=1).count() == 0
    assert len(deliveries(tmp_path)) == 10  # a delivered nothing: it was stopped before
    stop_all([b])


def test_fourth_poller_moves_about_a_quarter_of_shards(procs, tmp_path) -> None:
    n = 4000
    schedule(n, start_in=3, over=25)
    names = ["q1", "q2", "q3"]
    pollers = [procs(name, "--batch-size", "200") for name in names]
    three = assignment(shard_count=64, live=names)
    wait_for(lambda: owners() == three, 30, "three-poller assignment")
    pollers.append(procs("q4", "--batch-size", "200"))
    four = assignment(shard_count=64, live=[*names, "q4"])
    wait_for(lambda: owners() == four, 30, "four-poller assignment")
    moved = {s for s in three if three[s] != four[s]}
    assert all(four[s] == "q4" for s in moved)
    assert 8 <= len(moved) <= 26, len(moved)  # expected 16 of 64
    wait_for(lambda: Job.objects.filter(status="delivered").count() == n, 60, "all delivered")
    assert_all_delivered_never_early(n)
    log = deliveries(tmp_path)
    assert {job_id for job_id, *_ in log} == set(due_times())
    assert len(log) == n  # graceful hand-offs: no duplicates
    stop_all(pollers)


def test_sigterm_finishes_in_flight_batch_releases_leases_exits_0(procs, tmp_path) -> None:
    schedule(5, start_in=-1, over=0.1, handler="slow_record")
    poller = procs("t", "--batch-size", "5", "--concurrency", "5", handler_sleep=2.0)
    claimed = wait_for(
        lambda: [i for text in InFlightBatch.objects.values_list("job_ids", flat=True)
                 for i in ids_parse(text)],
        30,
        "a read",
        step=0.02,
    )  # fmt: skip
    poller.send_signal(signal.SIGTERM)
    asked = time.monotonic()
    assert poller.wait(timeout=15) == 0
    # The 2 s batch, then release and exit; the bound leaves room for a loaded
    # machine (process exit, connection close), well short of the 20 s grace.
    assert time.monotonic() - asked < 10
    assert set(Job.objects.filter(id__in=claimed).values_list("status", flat=True)) == {"delivered"}
    assert not ShardLease.objects.filter(owner__isnull=False).exists()
    assert sql("SELECT state FROM polling_poller WHERE name = 't'") == [("stopped",)]
