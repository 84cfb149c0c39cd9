"""The database goes away under the pollers: terminated backends, a cluster restart."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from django.db import connection

from tests.faults.cluster import BATCH_SIZE, Cluster, sql
from tests.faults.scenario import run, wait_in_flight

# Not this session's own backend: behind pgbouncer (make test-pgbouncer) a server
# connection keeps the application_name of the last client that used it. The batches
# in flight are read by the same statement, so as the backends die: a poller that
# reconnects at once takes a new epoch and forgets its old batches (their jobs to be
# sent again) before a later query could count them.
TERMINATE_SQL = """
SELECT count(pg_terminate_backend(pid)),
       (SELECT json_object_agg(id, job_ids) FROM scheduling_inflightbatch
        WHERE owner = ANY(%s))
FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'faults-p%%'
  AND pid <> pg_backend_pid()
"""


def _terminate_pollers(cluster: Cluster, times: int = 3) -> None:
    """Terminate every poller backend mid-dispatch, ``times`` times 1.5 s apart."""
    for _ in range(times):
        wait_in_flight(cluster, *cluster.pollers)
        window = cluster.fault_begin("pg_terminate_backend of the pollers")
        killed, at_kill = sql(TERMINATE_SQL, [list(cluster.pollers)])[0]
        # The in-flight batches (their write-backs fail): those there when the backends
        # died, and any a read that was committing then added.
        ids_of = {int(batch): ids.split(",") for batch, ids in (at_kill or {}).items()}
        batches = {batch: len(ids) for batch, ids in ids_of.items()}
        after = cluster.batches()
        window.in_flight = sum({**batches, **after}.values())
        window.jobs = [i for ids in ids_of.values() for i in ids]
        window.note = f"at kill {sorted(batches)}; after {sorted(after)}"
        cluster.fault_end(window)
        assert killed >= 1
        time.sleep(1.5)


@pytest.mark.parametrize("seed", [1])
def test_pg_terminate_backend_during_dispatch(make_cluster, seed: int) -> None:
    run(make_cluster(), "pg_terminate_backend", seed=seed, fault=_terminate_pollers, fault_at=3)


@pytest.mark.faults_full
@pytest.mark.parametrize("seed", [2])
def test_pg_terminate_backend_more_seeds(make_cluster, seed: int) -> None:
    run(make_cluster(), "pg_terminate_backend", seed=seed, fault=_terminate_pollers, fault_at=3)


def _restart_cluster(cluster: Cluster) -> None:
    """``pg_ctlcluster ... restart -m immediate``: every connection dies, no checkpoint."""
    wait_in_flight(cluster, *cluster.pollers)
    # Rows claimed between this count and the crash: at most one batch per poller.
    in_flight = cluster.claimed_by() + BATCH_SIZE * len(cluster.pollers)
    window = cluster.fault_begin("PostgreSQL restart -m immediate", in_flight=in_flight)
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "restart", "-m", "immediate"],
        check=True,
        timeout=120,
    )
    connection.close()
    deadline = time.monotonic() + 60
    while True:
        try:
            sql("SELECT 1")
            break
        except Exception:
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    cluster.fault_end(window)


@pytest.mark.faults_full
@pytest.mark.skipif(
    os.environ.get("SENDLATER_FAULTS_PG_RESTART") != "1",
    reason="restarts the shared PostgreSQL cluster: only with SENDLATER_FAULTS_PG_RESTART=1",
)
@pytest.mark.parametrize("seed", [1])
def test_postgresql_restart_immediate(make_cluster, seed: int) -> None:
    # The pollers back off (up to 5 s) while the server is down: allow for it.
    run(
        make_cluster(),
        "PostgreSQL restart",
        seed=seed,
        fault=_restart_cluster,
        fault_at=3,
        duration=16,
        extra_recovery=8.0,
    )
