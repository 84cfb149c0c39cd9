"""Flow-control limits hold across two ``runpoller`` processes (both databases).

A key's rate and parallelism are the service's, not each poller's: two pollers
share each key's row. Delivery times come from the test handlers' logs
(``tests.support.recording``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta

import pytest

from scheduling.flow.services import flow_limits_set
from scheduling.jobs.services import JobSpec, job_schedule_many
from scheduling.models import Job
from scheduling.sharding.clock import db_now
from tests.support.factories import team_create
from tests.support.procs import ROOT, child_env
from tests.support.recording import deliveries, spans

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pollers(tmp_path):
    started: list[subprocess.Popen] = []

    def start(count: int, *, handler_sleep: float = 0.0) -> None:
        for i in range(count):
            env = child_env(
                SENDLATER_LEASE_SECONDS="3",
                SENDLATER_POLL_INTERVAL_SECONDS="0.2",
                SENDLATER_HANDLER_MODULES="tests.support.recording",
                SENDLATER_TEST_RECORD_DIR=str(tmp_path),
                SENDLATER_TEST_SLOW_SECONDS=str(handler_sleep),
                SENDLATER_DB_POOL="false",
            )
            log = open(tmp_path / f"p{i}.stderr", "w")  # noqa: SIM115 (closed with the process)
            started.append(
                subprocess.Popen(
                    [sys.executable, "manage.py", "runpoller", "--name", f"flow-p{i}"],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )

    yield start
    for proc in started:
        proc.terminate()
    for proc in started:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _schedule(team, count: int, *, handler: str, key: str | None, due_in: float = 1.0) -> list:
    first = db_now() + timedelta(seconds=due_in)
    specs = [
        JobSpec(
            due_at=first + timedelta(milliseconds=i),
            target_kind="handler",
            target=handler,
            payload={"i": i},
        )
        for i in range(count)
    ]
    ids = [job.id for job, _ in job_schedule_many(team=team, specs=specs)]
    if key is not None:
        Job.objects.filter(id__in=ids).update(flow_control_key=key)
    return ids


def _wait_delivered(ids: list, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Job.objects.filter(id__in=ids, status="delivered").count() == len(ids):
            return
        time.sleep(0.2)
    done = Job.objects.filter(id__in=ids, status="delivered").count()
    raise AssertionError(f"{done} of {len(ids)} delivered within {timeout}s")


def test_rate_holds_across_two_pollers_and_other_keys_go_at_once(pollers, tmp_path) -> None:
    team = team_create(slug="flowrate")
    flow_limits_set(team=team, key="partner", rate=20, period_seconds=1)
    keyed = _schedule(team, 80, handler="record", key="partner")
    plain = _schedule(team, 300, handler="record", key=None)
    pollers(2)
    _wait_delivered(keyed + plain, timeout=90)
    rows = deliveries(tmp_path)
    wanted = {str(i) for i in keyed}
    times = sorted(at for job, _, at, _ in rows if job in wanted)
    assert len(times) == 80
    assert len({pid for job, _, _, pid in rows if job in wanted}) == 2  # both pollers sent
    # Paced: 80 jobs at 20/s take about four seconds, whatever the number of pollers.
    assert times[-1] - times[0] >= 79 / 20 * 0.9
    # In any window of one second, the rate; a poller behind its slots (a loaded
    # machine) may send up to a quarter second of them at once (docs/delivery.md).
    busiest = max(sum(1 for t in times[i:] if t < start + 1.0) for i, start in enumerate(times))
    assert busiest <= 20 + 2 * 5 + 1, busiest
    # The other jobs of the same shards did not wait behind the key.
    plain_ids = {str(i) for i in plain}
    plain_times = [at for job, _, at, _ in rows if job in plain_ids]
    assert max(plain_times) < times[-1] - 1.0


def test_parallelism_holds_across_two_pollers(pollers, tmp_path) -> None:
    team = team_create(slug="flowpar")
    flow_limits_set(team=team, key="narrow", rate=None, parallelism=3)
    keyed = _schedule(team, 18, handler="span_record", key="narrow")
    pollers(2, handler_sleep=0.3)
    _wait_delivered(keyed, timeout=90)
    runs = spans(tmp_path)
    assert len(runs) == 18
    events = sorted([(s, 1) for _, s, _, _ in runs] + [(e, -1) for _, _, e, _ in runs])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    assert most <= 3, most
    assert most >= 2  # the limit is used, not one at a time
