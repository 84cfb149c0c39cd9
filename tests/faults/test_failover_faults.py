"""Losing the primary: ``kill -9`` of a pg_auto_failover node mid-burst (docs/ha.md).

Runs against the formation of ``make ha-up`` (``make faults`` starts it, runs this
with ``DATABASE_URL`` set to its multi-host URL and ``SENDLATER_FAULTS_HA=1``, and
removes it): the API and the pollers connect with
``target_session_attrs=read-write``, the primary node (its ``pg_autoctl`` and its
postmaster) is killed while webhooks are being delivered and jobs created, the
monitor promotes the synchronous secondary, and nothing is restarted.
"""

from __future__ import annotations

import os
import signal
import time

import psycopg
import pytest
from django.db import connection

from polling.engine.poller import FAILURE_BACKOFF_CAP_SECONDS
from tests.faults.cluster import BATCH_SIZE, Cluster, sql
from tests.faults.conftest import RESULTS, report_and_assert
from tests.faults.invariants import LAG_TARGET_SECONDS, check
from tests.faults.scenario import DRAIN_TIMEOUT_SECONDS, wait_in_flight
from tests.faults.workload import RacingWriter, schedule

PROMOTION_TIMEOUT_SECONDS = 90

pytestmark = [
    pytest.mark.faults_full,
    pytest.mark.skipif(
        os.environ.get("SENDLATER_FAULTS_HA") != "1",
        reason="needs a pg_auto_failover formation: make faults starts one (make ha-up) and "
        "sets SENDLATER_FAULTS_HA=1 with DATABASE_URL=its multi-host URL",
    ),
]


def _nodes() -> list[tuple[str, int]]:
    s = connection.settings_dict
    hosts = str(s["HOST"]).split(",")
    ports = [int(p) for p in str(s["PORT"]).split(",")]
    return list(zip(hosts, ports, strict=True))


def _primary_postmaster() -> int:
    """The postmaster pid of the node that is read-write now."""
    for host, port in _nodes():
        try:
            with psycopg.connect(
                host=host, port=port, dbname="postgres", user="postgres", connect_timeout=2
            ) as conn:
                (recovery, datadir) = conn.execute(
                    "SELECT pg_is_in_recovery(), current_setting('data_directory')"
                ).fetchone()
        except psycopg.OperationalError:
            continue
        if not recovery:
            with open(os.path.join(datadir, "postmaster.pid")) as pidfile:
                return int(pidfile.readline())
    raise AssertionError(f"no read-write node among {_nodes()}")


def _kill_primary(cluster: Cluster, kills: list[float]) -> None:
    """kill -9 the primary node: its pg_autoctl (the process group ha.sh started with
    setsid) and its postmaster, as if the machine were gone. Blocks until the
    secondary is promoted and answers writes."""
    wait_in_flight(cluster, *cluster.pollers)
    # Rows claimed between this count and the crash: at most one batch per poller.
    in_flight = cluster.claimed_by() + BATCH_SIZE * len(cluster.pollers)
    postmaster = _primary_postmaster()
    group = os.getpgid(postmaster)
    assert group != os.getpgrp(), "the node shares the test's process group"
    window = cluster.fault_begin("kill -9 of the primary (pg_auto_failover)", in_flight)
    kills.append(time.time())
    os.killpg(group, signal.SIGKILL)
    os.kill(postmaster, signal.SIGKILL)
    # Until the kernel has reaped it, the dead postmaster's socket may still take a
    # connect: probe for the new primary only once it is gone.
    while os.path.exists(f"/proc/{postmaster}"):
        time.sleep(0.01)
    _wait_for_primary()
    cluster.fault_end(window)


def _wait_for_primary() -> None:
    """Until this process's own connection reaches a primary again (a fresh one)."""
    connection.close()
    deadline = time.monotonic() + PROMOTION_TIMEOUT_SECONDS
    while True:
        try:
            sql("SELECT txid_current()")  # fails on a standby: a primary answers
            return
        except Exception:
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _times(cluster: Cluster, since: float, due: dict[str, float]) -> tuple[float, float]:
    """The first delivery after ``since`` (the promotion: no webhook that was already
    in flight at the kill), and the last one after it later than the lag target
    (lag back under target from then), in unix seconds."""
    after = sorted(
        (r.at, r.at - max(due.get(r.job_id, r.due_at), r.due_at))
        for r in cluster.receiver.snapshot()
        if 200 <= r.status < 300 and r.at > since
    )
    first = after[0][0] if after else float("inf")
    late = [at for at, lag in after if lag > LAG_TARGET_SECONDS]
    return first, max(late) if late else first


@pytest.mark.parametrize("seed", [1])
def test_primary_kill_9_failover(make_cluster, seed: int) -> None:
    cluster = make_cluster()
    kills: list[float] = []
    # A burst: 600 webhooks due over 20 s from 2 s ahead; jobs created meanwhile.
    acked = schedule(cluster, seed=seed, n=600, start_in=2.0, span=20.0)
    t0 = time.monotonic()
    with RacingWriter(cluster, seed=seed, every=0.1) as racer:
        time.sleep(max(0.0, 6.0 - (time.monotonic() - t0)))
        _kill_primary(cluster, kills)
        time.sleep(max(0.0, 30.0 - (time.monotonic() - t0)))
    # The harness's own connection (not the system under test) may have been cut
    # since the promotion, as the formation settles: start the checks on a fresh one.
    _wait_for_primary()
    cluster.drain(DRAIN_TIMEOUT_SECONDS)
    report = check(
        cluster,
        f"primary kill -9, failover (seed {seed})",
        # A poller that failed while no primary answered waits out its backoff.
        extra_recovery=FAILURE_BACKOFF_CAP_SECONDS,
    )
    acked += racer.ids
    query = "SELECT id::text, status FROM scheduling_job WHERE id = ANY(%s::uuid[])"
    status = dict(sql(query, [acked]))
    lost_acked = [job_id for job_id in acked if status.get(job_id) != "delivered"]
    if lost_acked:
        report.fail(f"I1: {len(lost_acked)} acknowledged jobs not delivered: {lost_acked[:3]}")
    due = {
        str(job_id): at.timestamp()
        for job_id, at in sql(
            "SELECT id, COALESCE((payload->>'due')::timestamptz, due_at) FROM scheduling_job"
        )
    }
    window = cluster.faults[0]
    first, back = _times(cluster, window.end, due)
    refused = [e for e in racer.errors if e.startswith("503")]
    figures = (
        f"  failover: writes accepted again {window.end - kills[0]:.1f}s after the kill, first"
        f" delivery after that at {first - kills[0]:.1f}s, lag back under"
        f" {LAG_TARGET_SECONDS:.1f}s at {back - kills[0]:.1f}s;"
        f" acknowledged {len(acked)}, lost {len(lost_acked)}; creates refused 503 {len(refused)},"
        f" other errors {len(racer.errors) - len(refused)}"
    )
    others = sorted({e[:120] for e in racer.errors if not e.startswith("503")})
    if others:
        figures += "\n  other errors, distinct: " + "; ".join(others[:5])
    RESULTS.append(figures)
    print(figures)
    report_and_assert(report)
