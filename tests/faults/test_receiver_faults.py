"""The webhook receiver misbehaves: 500s, 429 with Retry-After, hangs, goes away."""

from __future__ import annotations

import itertools
import time
from collections import defaultdict

import pytest

from tests.faults.cluster import (
    BREAKER_MAX_COOLDOWN_SECONDS,
    READ_TIMEOUT_SECONDS,
    RETRY_CAP_SECONDS,
    Cluster,
)
from tests.faults.scenario import run

OUTAGE_SECONDS = 3.0
# A job failing at the outage's end comes back after its backoff or the breaker's cooldown.
RETRY_RECOVERY = RETRY_CAP_SECONDS + BREAKER_MAX_COOLDOWN_SECONDS


def _mode_for(mode: str, seconds: float = OUTAGE_SECONDS):
    def fault(cluster: Cluster) -> None:
        window = cluster.fault_begin(f"receiver {mode}")
        cluster.receiver.mode = mode
        time.sleep(seconds)
        cluster.receiver.mode = "ok"
        cluster.fault_end(window)

    return fault


def _down(cluster: Cluster) -> None:
    window = cluster.fault_begin("receiver down")
    cluster.receiver.down()
    time.sleep(OUTAGE_SECONDS)
    cluster.receiver.up()
    cluster.fault_end(window)


@pytest.mark.parametrize("seed", [1])
def test_receiver_answers_500(make_cluster, seed: int) -> None:
    """A 3 s outage of 500s, and 2 % of jobs whose endpoint always fails: those end
    dead with every attempt recorded, the rest are delivered once."""
    report = run(
        make_cluster(),
        "receiver 500s",
        seed=seed,
        fault=_mode_for("500"),
        extra_recovery=RETRY_RECOVERY,
        dead_fraction=0.02,
    )
    assert report.dead >= 1 and report.duplicates == 0


@pytest.mark.faults_full
@pytest.mark.parametrize("seed", [1])
def test_receiver_answers_429_with_retry_after(make_cluster, seed: int) -> None:
    cluster = make_cluster()
    cluster.receiver.retry_after_seconds = 2
    report = run(
        cluster,
        "receiver 429 Retry-After",
        seed=seed,
        fault=_mode_for("429"),
        extra_recovery=2 + RETRY_RECOVERY,
    )
    assert report.duplicates == 0
    # Retry-After is a lower bound on the next try of the same job.
    by_job = defaultdict(list)
    for receipt in sorted(cluster.receiver.snapshot(), key=lambda r: r.at):
        by_job[receipt.job_id].append(receipt)
    gaps = [
        b.at - a.at
        for got in by_job.values()
        for a, b in itertools.pairwise(got)
        if a.status == 429
    ]
    assert gaps and min(gaps) >= 2 - 0.05, min(gaps)


@pytest.mark.faults_full
@pytest.mark.parametrize("seed", [1])
def test_receiver_hangs_past_the_timeout(make_cluster, seed: int) -> None:
    """The receiver takes 2 s to answer 200 (the read timeout is 1 s): each hung
    request may have been acted on by the receiver, so it may come again."""
    cluster = make_cluster()
    cluster.receiver.hang_seconds = READ_TIMEOUT_SECONDS + 1.0

    def fault(c: Cluster) -> None:
        _mode_for("hang")(c)
        w = c.faults[-1]
        w.in_flight = sum(1 for r in c.receiver.snapshot() if w.start <= r.at <= w.end)

    name = "receiver hangs past timeout"
    run(cluster, name, seed=seed, fault=fault, extra_recovery=RETRY_RECOVERY)


@pytest.mark.faults_full
@pytest.mark.parametrize("seed", [1])
def test_receiver_down(make_cluster, seed: int) -> None:
    report = run(
        make_cluster(), "receiver down", seed=seed, fault=_down, extra_recovery=RETRY_RECOVERY
    )
    assert report.duplicates == 0
