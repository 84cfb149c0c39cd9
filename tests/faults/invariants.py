"""I1-I6, checked after a scenario has drained: SQL over the jobs and the audit
trail, and the receiver's own record of what arrived.

A *delivery* is a receipt the receiver answered 2xx; a *duplicate* is every
delivery of a job after its first. Times are unix seconds on this machine's
clock, which is also the database server's (same host): "early" is measured
against the database clock.
"""

from __future__ import annotations

import json
import os
import uuid
from bisect import bisect_left
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from tests.faults.cluster import LEASE_SECONDS, POLL_SECONDS, Cluster, sql
from tests.faults.receiver import Receipt

LAG_TARGET_SECONDS = 3.0  # healthy pollers fire within this of due (2 shared cores, loaded)
# I5 measures the machine as much as the service: on 2 shared cores a neighbour's
# benchmark stretches every statement. ``make faults`` (SENDLATER_FAULTS_STRICT_LAG=1)
# fails on it; the quick subset in ``make test`` reports it and fails on I1-I4, I6.
STRICT_LAG = os.environ.get("SENDLATER_FAULTS_STRICT_LAG") == "1"
BASELINE_MIN_JOBS = 20  # first deliveries before the first fault that make a baseline
SLACK_SECONDS = 1.5  # process start-up and scheduling noise on a 2-core machine


@dataclass
class Report:
    name: str
    jobs: int = 0
    delivered: int = 0
    dead: int = 0
    lost: int = 0
    duplicates: int = 0
    bound: int = 0
    early: int = 0
    max_lag: float = 0.0
    throughput: float = 0.0
    lag_target: float = LAG_TARGET_SECONDS
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"{self.name}: jobs: {self.jobs}, delivered: {self.delivered}, dead: {self.dead}, "
            f"lost: {self.lost}, duplicates: {self.duplicates} (bound {self.bound}), "
            f"early: {self.early}, max lag: {self.max_lag:.2f}s (target {self.lag_target:.1f}s)"
        )

    def fail(self, what: str) -> None:
        self.violations.append(what)


def check(
    cluster: Cluster,
    name: str,
    *,
    extra_recovery: float = 0.0,
    extra_bound: int = 0,
) -> Report:
    """Check I1-I6 and return the report (the caller prints and asserts on it)."""
    report = Report(name)
    # The due time asked for: a retry moves ``due_at`` on, the payload keeps the first.
    # A job written with a due time already past can fire no earlier than its write:
    # lag counts from the later of the two.
    jobs = {
        str(job_id): (status, due.timestamp(), attempts, recorded, created.timestamp())
        for job_id, status, due, attempts, recorded, created in sql(
            "SELECT j.id, j.status, COALESCE((j.payload->>'due')::timestamptz, j.due_at),"
            " j.attempts,"
            " (SELECT count(*) FROM scheduling_deliveryattempt a WHERE a.job_id = j.id),"
            " j.created_at FROM scheduling_job j"
        )
    }
    receipts = cluster.receiver.snapshot()
    _dump(cluster, jobs, receipts)
    report.jobs = len(jobs)
    _no_loss(report, jobs, receipts)
    firsts = _duplicates(report, cluster, receipts, extra_bound)
    _fencing(report)
    _checkpoints(report)
    _recovery(report, cluster, jobs, firsts, extra_recovery)
    _never_early(report, jobs, receipts)
    return report


def _dump(cluster: Cluster, jobs: dict, receipts: list[Receipt]) -> None:
    """Keep the receiver's table and the jobs' end state beside the logs (post-mortems)."""
    doc = {
        "receipts": [asdict(r) for r in receipts],
        "jobs": {job_id: list(row) for job_id, row in jobs.items()},
        "faults": [asdict(w) for w in cluster.faults],
        "attempts": [
            [str(j), a, s.timestamp(), p, r]
            for j, a, s, p, r in sql(
                "SELECT job_id, attempt, started_at, poller, result FROM scheduling_deliveryattempt"
            )
        ],
    }
    (cluster.tmp / "scenario.json").write_text(json.dumps(doc))


def _no_loss(report: Report, jobs: dict, receipts: list[Receipt]) -> None:
    """I1: every job ended delivered (and the receiver has it) or dead with attempts."""
    ok = {r.job_id for r in receipts if 200 <= r.status < 300}
    for job_id, (status, _due, attempts, recorded, _created) in jobs.items():
        if status == "delivered":
            report.delivered += 1
            if job_id not in ok:
                report.lost += 1
        elif status == "dead":
            report.dead += 1
            if not recorded or recorded < attempts:
                report.fail(f"I1: dead job {job_id} has {recorded} of {attempts} attempts recorded")
        else:
            report.lost += 1
    if report.lost:
        report.fail(f"I1: {report.lost} jobs lost (not delivered nor dead, or never received)")
    (behind,) = sql(
        "SELECT count(*) FROM scheduling_job j JOIN polling_shardcheckpoint c ON c.shard = j.shard"
        " WHERE j.status = 'pending' AND j.bucket <= c.last_drained"
    )[0]
    # Batches still recorded in flight under a lease that is not theirs any more: their
    # jobs would answer 409 to a cancel until a new owner forgets them.
    (stale,) = sql(
        "SELECT count(*) FROM scheduling_inflightbatch f JOIN polling_shardlease l"
        " ON l.shard = f.shard WHERE l.owner IS DISTINCT FROM f.owner OR l.epoch <> f.epoch"
        " OR l.expires_at <= statement_timestamp()"
    )[0]
    if behind or stale:
        report.fail(f"I1: {behind} rows behind a checkpoint, {stale} batches on a dead lease")


def _duplicates(
    report: Report, cluster: Cluster, receipts: list[Receipt], extra_bound: int
) -> dict[str, float]:
    """I2: duplicates only in a fault window, at most the rows then in flight."""
    by_job: dict[str, list[Receipt]] = defaultdict(list)
    for receipt in receipts:
        if receipt.webhook_id != receipt.job_id:
            report.fail(f"I2: webhook-id {receipt.webhook_id} carried job {receipt.job_id}")
        if 200 <= receipt.status < 300:
            by_job[receipt.job_id].append(receipt)
    report.bound = sum(w.in_flight for w in cluster.faults) + extra_bound
    windows = [
        (w.start - SLACK_SECONDS, (w.end or w.start) + LEASE_SECONDS) for w in cluster.faults
    ]
    firsts: dict[str, float] = {}
    for job_id, got in by_job.items():
        got.sort(key=lambda r: r.at)
        firsts[job_id] = got[0].at
        if len(got) > 1:
            report.duplicates += len(got) - 1
            if not any(lo <= got[0].at <= hi for lo, hi in windows):
                report.fail(f"I2: job {job_id} duplicated outside every fault window")
    if report.duplicates > report.bound:
        report.fail(f"I2: {report.duplicates} duplicates > bound {report.bound}")
        _duplicates_explained(cluster, by_job)
    return firsts


def _fencing(report: Report) -> None:
    """I3: no job written under epoch e after a newer epoch of its shard began.

    A job's epoch is that of the poller's latest read of it before the write
    (``faults_read``); a poller's write of a job it never read is a violation too.
    ``faults_job_write`` holds in-partition writes (UPDATE) and retries that moved
    their row to another partition (DELETE + INSERT, ``moved``) alike.
    """
    (stale, stale_moved, unread) = sql(
        "SELECT count(*), count(*) FILTER (WHERE w.moved), count(*) FILTER (WHERE r.epoch IS NULL)"
        " FROM faults_job_write w LEFT JOIN LATERAL (SELECT r.shard, r.epoch FROM faults_read r"
        " WHERE r.job_id = w.job_id AND r.owner = w.writer AND r.at <= w.at"
        " ORDER BY r.at DESC LIMIT 1) r ON true"
        " WHERE r.epoch IS NULL OR r.shard <> w.shard OR EXISTS (SELECT 1 FROM faults_lease l"
        " WHERE l.shard = w.shard AND l.epoch > r.epoch AND l.acquired_at < w.written_at)"
    )[0]
    if stale:
        report.fail(
            f"I3: {stale} writes applied under a superseded epoch"
            f" ({stale_moved} of them retries moved to another partition, {unread} never read)"
        )


def _checkpoints(report: Report) -> None:
    """I4: checkpoints only move forward; none passes a bucket holding open rows
    (a write that commits after its bucket closed is the sweep's: I1 checks it)."""
    (backward,) = sql(
        "SELECT count(*) FROM faults_checkpoint WHERE old IS NOT NULL AND new <= old OR new IS NULL"
    )[0]
    if backward:
        report.fail(f"I4: {backward} checkpoint moves backward")


def _recovery(
    report: Report, cluster: Cluster, jobs: dict, firsts: dict[str, float], extra: float
) -> None:
    """I5: a job is first delivered within the lag target of its due time, or of
    the recovery deadline of a fault that began before it was delivered:
    fault end + lease + 2 polls (+ ``extra``) + backlog / measured throughput."""
    if firsts:
        times = sorted(firsts.values())
        peak = max(bisect_left(times, start + 1.0) - i for i, start in enumerate(times))
        report.throughput = float(peak)  # the most first deliveries in any one second
    deadlines = []
    for w in cluster.faults:
        # Takeover: a lease, two polls (and ``extra``, e.g. retry backoff) after the end;
        # then the backlog piled up by then drains at the measured throughput.
        takeover = (w.end or w.start) + LEASE_SECONDS + 2 * POLL_SECONDS + extra
        backlog = sum(1 for job_id, at in firsts.items() if at > takeover >= _ready(jobs[job_id]))
        drain = backlog / report.throughput if report.throughput else 0.0
        deadlines.append((w.start, takeover + drain))
    # The target: the fixed one, or twice the p95 lag before the first fault if the
    # machine is slower than that today (other work on 2 shared cores slows it all).
    first_fault = min((w.start for w in cluster.faults), default=float("inf"))
    before = sorted(at - _ready(jobs[j]) for j, at in firsts.items() if at < first_fault)
    report.lag_target = LAG_TARGET_SECONDS
    if len(before) >= BASELINE_MIN_JOBS and cluster.faults:
        report.lag_target = max(LAG_TARGET_SECONDS, 2 * before[int(0.95 * (len(before) - 1))])
    late = []
    for job_id, at in firsts.items():
        due = _ready(jobs[job_id])
        report.max_lag = max(report.max_lag, at - due)
        allowed = max([due, *(d for start, d in deadlines if start <= at)])
        if at > allowed + report.lag_target + SLACK_SECONDS:
            late.append(f"{job_id} due {due:.2f} first delivered {at:.2f} allowed {allowed:.2f}")
    if late:
        # What the first late jobs went through: each request (attempt@time:status).
        tried: dict[str, list[str]] = {}
        for r in sorted(cluster.receiver.snapshot(), key=lambda r: r.at):
            tried.setdefault(r.job_id, []).append(f"{r.attempt}@{r.at:.2f}:{r.status}")
        late[:3] = [
            f"{line} requests {tried.get(job, [])} attempts {_attempts(job)}"
            for line in late[:3]
            if (job := line.split()[0])
        ]
        faults = [(w.what, round(w.start, 2), round(w.end, 2)) for w in cluster.faults]
        what = f"I5: {len(late)} jobs delivered after their deadline: {late[:3]} {faults}"
        if STRICT_LAG:
            report.fail(what)
        else:
            report.warnings.append(what)


def _attempts(job_id: str) -> list[str]:
    """A job's recorded attempts (attempt@start:poller:error), to explain a late one."""
    from scheduling.models import DeliveryAttempt

    try:
        rows = DeliveryAttempt.objects.filter(job_id=job_id).order_by("attempt")
        return [
            f"{a.attempt}@{a.started_at.timestamp():.2f}:{a.poller}:{a.error[:40]}" for a in rows
        ]
    except Exception as error:  # a diagnostic only: never hide the invariant's verdict
        return [f"unreadable: {error}"]


def _ready(job: tuple) -> float:
    """When a job could first fire: its due time, or its write if that came later."""
    return max(job[1], job[4])


def _never_early(report: Report, jobs: dict, receipts: list[Receipt]) -> None:
    """I6: no request (whatever its answer) reached the receiver before the job's due
    time, nor a retry before the due time it was rescheduled to."""
    report.early = sum(
        1 for r in receipts if r.job_id in jobs and r.at < max(jobs[r.job_id][1], r.due_at)
    )
    if report.early:
        report.fail(f"I6: {report.early} requests before their due time")


def _duplicates_explained(cluster: Cluster, by_job: dict[str, list[Receipt]]) -> None:
    """Print, for a failed I2, each duplicated job's deliveries and reads (``faults_read``:
    shard, epoch, owner, when) and the fault windows that had it in flight."""
    for window in cluster.faults:
        print(f"fault window {window.what}: {window.start:.3f}-{window.end:.3f}, {window.note}")
    for job_id, got in by_job.items():
        if len(got) < 2:
            continue
        windows = [i for i, w in enumerate(cluster.faults) if uuid.UUID(job_id).hex in w.jobs]
        reads = sql(
            "SELECT shard, epoch, owner, extract(epoch FROM at)::float FROM faults_read"
            " WHERE job_id = %s ORDER BY at",
            [job_id],
        )
        print(
            f"duplicated {job_id}: delivered at {[round(r.at, 3) for r in got]},"
            f" in flight in windows {windows}, reads {reads}"
        )
