"""Pollers that die, freeze or stall between delivery and write-back."""

from __future__ import annotations

import signal
import time

import pytest

from tests.faults.cluster import LEASE_SECONDS, Cluster
from tests.faults.scenario import run, wait_in_flight


def _kill_9(cluster: Cluster) -> None:
    wait_in_flight(cluster, "p0")
    cluster.signal("p0", signal.SIGKILL)
    window = cluster.fault_begin("kill -9 p0")
    cluster.pollers["p0"].wait(timeout=5)
    window.in_flight = cluster.claimed_by("p0")  # frozen now: nobody renews p0's leases
    cluster.fault_end(window)


def _sigstop(cluster: Cluster) -> None:
    wait_in_flight(cluster, "p1")
    cluster.signal("p1", signal.SIGSTOP)
    window = cluster.fault_begin("SIGSTOP p1")
    time.sleep(0.05)
    window.in_flight = cluster.claimed_by("p1")
    time.sleep(LEASE_SECONDS + 2.0)  # well past its lease: the others take its shards over
    cluster.signal("p1", signal.SIGCONT)  # its batch goes on; the write-back is fenced out
    cluster.fault_end(window)


@pytest.mark.parametrize("seed", [1])
def test_kill_9_mid_batch(make_cluster, seed: int) -> None:
    run(make_cluster(), "kill -9 mid-batch", seed=seed, fault=_kill_9)


@pytest.mark.faults_full
@pytest.mark.parametrize("seed", [2, 3])
def test_kill_9_mid_batch_more_seeds(make_cluster, seed: int) -> None:
    run(make_cluster(), "kill -9 mid-batch", seed=seed, fault=_kill_9)


@pytest.mark.parametrize("seed", [1])
def test_kill_9_with_flow_control(make_cluster, seed: int) -> None:
    """Half the jobs belong to flow-control keys (a rate, a parallelism): the key
    reads and their slots ride through a poller killed mid-batch as the rest do;
    the dead poller's slots stop counting with its lease."""
    cluster = make_cluster()
    for key, limits in (("fk-rate", {"rate": 100}), ("fk-par", {"parallelism": 8})):
        status, body = cluster.request("PUT", f"/api/v1/flow-controls/{key}", limits)
        assert status in (200, 201), (status, body)
    run(
        cluster,
        "kill -9 with flow control",
        seed=seed,
        fault=_kill_9,
        flow_keys=("fk-rate", "fk-par"),
    )


@pytest.mark.parametrize("seed", [1])
def test_sigstop_past_lease_then_sigcont(make_cluster, seed: int) -> None:
    run(make_cluster(), "SIGSTOP past lease", seed=seed, fault=_sigstop, duration=14.0)


@pytest.mark.faults_full
@pytest.mark.parametrize("seed", [2, 3])
def test_sigstop_more_seeds(make_cluster, seed: int) -> None:
    run(make_cluster(), "SIGSTOP past lease", seed=seed, fault=_sigstop, duration=14.0)


@pytest.mark.faults_full
@pytest.mark.parametrize("seed", [1, 2])
def test_failpoint_after_2xx_before_write_back(make_cluster, seed: int) -> None:
    """p0 exits between the receiver's 2xx and its write-back, once; its rows come
    back with its lease's expiry and are delivered again (same webhook-id)."""
    cluster = make_cluster(failpoints={"p0": "after_dispatch=once-exit"})

    def fault(c: Cluster) -> None:
        c.pollers["p0"].wait(timeout=15)
        window = c.fault_begin("failpoint after_dispatch exit p0")
        window.in_flight = c.claimed_by("p0")
        c.fault_end(window)

    report = run(cluster, "2xx then crash before write-back", seed=seed, fault=fault, fault_at=0)
    assert report.duplicates >= 1  # the failpoint really fired after a delivery


@pytest.mark.faults_full
@pytest.mark.parametrize("seed", [1])
def test_failpoint_stall_past_lease_before_write_back(make_cluster, seed: int) -> None:
    """p0 stalls past its lease after a delivered batch: the new owner re-delivers,
    p0's write-back is fenced out (I3) and it carries on."""
    stall = LEASE_SECONDS + 2
    cluster = make_cluster(failpoints={"p0": f"after_dispatch=once-sleep:{stall}"})

    def fault(c: Cluster) -> None:
        log = c.tmp / "p0.log"
        deadline = time.monotonic() + 15
        while "failpoint after_dispatch" not in log.read_text():  # p0's first batch
            assert time.monotonic() < deadline, "p0 never reached its failpoint"
            time.sleep(0.02)
        window = c.fault_begin("failpoint after_dispatch once-sleep p0")
        window.in_flight = c.claimed_by("p0")  # the stalled batch: delivered, not written
        time.sleep(stall)
        c.fault_end(window)

    report = run(cluster, "stall past lease before write-back", seed=seed, fault=fault, fault_at=0)
    assert "fenced out" in (cluster.tmp / "p0.log").read_text()
    assert report.duplicates >= 1


@pytest.mark.parametrize("seed", [1])
def test_batch_slower_than_the_lease_keeps_its_lease(make_cluster, seed: int) -> None:
    """A receiver answering in 0.9 s (inside the 1 s timeout) for 5 s: a full batch
    (25 rows, 8 at a time) lasts 3.6 s, longer than the 3 s lease. The poller must
    keep its lease through it: a lost lease fences out the write-back and the next
    owner delivers the batch again, round after round (regression: the background
    lease renewer, polling/ownership/renewer.py). Nothing is in flight "by fault": bound 0."""
    cluster = make_cluster(shards=4)

    def slow_receiver(c: Cluster) -> None:
        window = c.fault_begin("receiver slow: 0.9 s per answer")
        c.receiver.latency_seconds = 0.9
        time.sleep(5.0)
        c.receiver.latency_seconds = 0.005
        c.fault_end(window)

    report = run(
        cluster,
        "batch slower than the lease",
        seed=seed,
        fault=slow_receiver,
        n=150,
        span=2.0,
        fault_at=0,
        duration=5,
        racing=False,
    )
    assert report.duplicates == 0
    logs = "".join(p.read_text() for p in cluster.tmp.glob("p*.log"))
    assert "fenced out" not in logs and "lost leases" not in logs
