"""Fixtures of the fault suite: a cluster per scenario, and the figures it printed.

Every test here is marked ``faults`` and needs PostgreSQL; the ones outside the
quick subset are also marked ``faults_full`` and run only with
``SENDLATER_FAULTS_FULL=1`` (``make faults``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection

from scheduling.models import ShardCountSchedule, Team
from scheduling.teams import api_key_create
from tests.faults.audit import audit_install, audit_uninstall
from tests.faults.cluster import (
    RECEIVER_PORT_OFFSET,
    SETTINGS,
    Cluster,
    partitions_precreate,
)
from tests.faults.invariants import Report
from tests.faults.receiver import FaultReceiver

FULL = os.environ.get("SENDLATER_FAULTS_FULL") == "1"
RESULTS: list[str] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent != here:
            continue
        item.add_marker(pytest.mark.faults)
        item.add_marker(pytest.mark.slow)
        item.add_marker(pytest.mark.postgres)
        # transaction=True also re-seeds the shard-count schedule after each flush.
        item.add_marker(pytest.mark.django_db(transaction=True))
        if connection.vendor != "postgresql":
            item.add_marker(
                pytest.mark.skip(
                    reason="fault scenarios need PostgreSQL: real processes sharing one "
                    "server (SKIP LOCKED, pg_terminate_backend, cluster restarts)"
                )
            )
        elif item.get_closest_marker("faults_full") and not FULL:
            item.add_marker(
                pytest.mark.skip(reason="full run only: make faults (SENDLATER_FAULTS_FULL=1)")
            )


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if RESULTS:
        terminalreporter.section("fault scenarios")
        for line in RESULTS:
            terminalreporter.write_line(line)


def report_and_assert(report: Report) -> None:
    """Print the scenario's figures (summary and stdout) and fail on any violation."""
    line = report.line()
    flag = (
        "  VIOLATED" if report.violations else "  I5 late (not enforced)" if report.warnings else ""
    )
    RESULTS.append(line + flag)
    print(line)
    for warning in report.warnings:
        print("warning:", warning)
    assert not report.violations, "\n".join(report.violations)


@pytest.fixture
def make_cluster(transactional_db, settings, tmp_path) -> Iterator[Callable[..., Cluster]]:  # type: ignore[no-untyped-def]
    """Start gunicorn, pollers p0..p{n-1} and the receiver; tear all down after."""
    for name, value in SETTINGS.items():
        setattr(settings, name, value)
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]  # as the children have it
    audit_install()
    made: list[Cluster] = []

    def make(
        *,
        pollers: int = 3,
        failpoints: dict[str, str] | None = None,
        skew: dict | None = None,
        shards: int | None = None,
    ) -> Cluster:
        if shards is not None:  # before any bucket records a count
            ShardCountSchedule.objects.update(shard_count=shards)
        team = Team.objects.create(slug=f"faults-{time.monotonic_ns()}", name="faults")
        _key, secret = api_key_create(team=team, name="faults")
        cluster = Cluster(tmp=tmp_path, api_key=secret, receiver=FaultReceiver(port=0))
        # Registered before anything starts: a failure below (say, the receiver's port
        # is taken) must still stop gunicorn, or it holds its port for later tests.
        made.append(cluster)
        cluster.start_web()
        cluster.receiver.port = cluster.api_port + RECEIVER_PORT_OFFSET
        cluster.receiver.up()
        partitions_precreate()
        for i in range(pollers):
            name = f"p{i}"
            cluster.start_poller(
                name,
                failpoints=(failpoints or {}).get(name, ""),
                skew_seconds=(skew or {}).get(name, 0),
            )
        cluster.wait_ready()
        return cluster

    yield make
    for cluster in made:
        cluster.stop_all()
        cluster.receiver.down()
    audit_uninstall()
