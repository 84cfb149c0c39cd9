"""One budget per receiving host across pollers (``polling.flow.host_shares``) and one
poller's lanes (``polling.flow.host_lanes``): shares, parking, busy hosts left out of
reads, parked jobs handed back unwritten."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

import pytest
from django.db import connection

from polling.common.sql import host_filter
from polling.dispatch.base import ClaimedJob, Outcome
from polling.dispatch.hosts import host_key, origin_patterns, url_origin
from polling.flow.host_lanes import HostLanes
from polling.flow.host_shares import FRESH_SECONDS, shares_refresh, shares_release
from polling.models import HostShare
from scheduling.jobs.inflight import ids_parse
from scheduling.jobs.services import job_schedule
from scheduling.models import InFlightBatch, Job
from scheduling.sharding.clock import db_now
from tests.support.pollers import future_base, poller_build

pytestmark = pytest.mark.django_db

HOST = "hooks.example:443"


def published() -> dict[str, int]:
    return dict(HostShare.objects.filter(host=HOST).values_list("owner", "share"))


def test_one_poller_has_the_whole_cap() -> None:
    now = db_now()
    assert shares_refresh(owner="a", lanes={HOST: (500, 0)}, cap=8, now=now) == {HOST: 8}
    assert published() == {"a": 8}


def test_shares_follow_demand_and_never_add_up_past_the_cap() -> None:
    now = db_now()
    shares_refresh(owner="a", lanes={HOST: (30, 8)}, cap=8, now=now)
    # b arrives: a holds the whole cap, so b waits for a to shrink.
    assert shares_refresh(owner="b", lanes={HOST: (10, 0)}, cap=8, now=now) == {HOST: 0}
    assert sum(published().values()) <= 8
    # a shrinks to its part of the demand (3/4), but publishes its old share once more:
    # requests started under it may still be running.
    assert shares_refresh(owner="a", lanes={HOST: (30, 8)}, cap=8, now=now) == {HOST: 6}
    assert published()["a"] == 8
    assert shares_refresh(owner="b", lanes={HOST: (10, 0)}, cap=8, now=now) == {HOST: 0}
    # At a's next refresh (its transport at 6 now), b takes the rest.
    shares_refresh(owner="a", lanes={HOST: (30, 6)}, cap=8, now=now)
    assert shares_refresh(owner="b", lanes={HOST: (10, 0)}, cap=8, now=now) == {HOST: 2}
    assert published() == {"a": 6, "b": 2}


def test_a_poller_with_no_jobs_for_a_host_takes_none_and_a_gone_one_stops_counting() -> None:
    now = db_now()
    shares_refresh(owner="a", lanes={HOST: (10, 0)}, cap=8, now=now)
    shares_refresh(owner="b", lanes={HOST: (10, 0)}, cap=8, now=now)
    assert shares_refresh(owner="b", lanes={HOST: (0, 0)}, cap=8, now=now) == {}
    assert "b" not in published()  # no demand: no row
    assert shares_refresh(owner="a", lanes={HOST: (10, 0)}, cap=8, now=now) == {HOST: 8}
    # b comes back, then dies: after FRESH_SECONDS its row no longer counts.
    shares_refresh(owner="a", lanes={HOST: (10, 0)}, cap=8, now=now)
    shares_refresh(owner="b", lanes={HOST: (10, 0)}, cap=8, now=now)
    later = now + timedelta(seconds=FRESH_SECONDS + 1)
    assert shares_refresh(owner="a", lanes={HOST: (10, 4)}, cap=8, now=later) == {HOST: 8}
    shares_release(owner="a")
    assert "a" not in published()


def test_origin_patterns_match_exactly_the_urls_of_their_origins(team) -> None:
    base = future_base()
    targets = [
        "https://a.example/hook",
        "https://a.example?x=1",
        "https://a.example",
        "https://a.example.org/hook",  # another host: never left out
        "https://a.example:8443/hook",  # another port
        "https://b_c.example/%/hook",  # LIKE's wildcards in a URL are literal
        "https://bxc.example/%/hook",
    ]
    for target in targets:
        job_schedule(team=team, due_at=base, target_kind="webhook", target=target, now=base)
    clause, params = host_filter(
        "j", origin_patterns([url_origin(targets[0]), url_origin(targets[5])])
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT j.target FROM scheduling_job j WHERE j.status = 'pending'{clause}", params
        )
        kept = {row[0] for row in cursor.fetchall()}
    assert kept == {targets[3], targets[4], targets[6]}
    assert (
        host_key(targets[0])
        == host_key("https://A.example:443/x")
        == ("a.example:443", "a.example")
    )


def lanes_build(window: int = 100) -> HostLanes:
    caps: list[dict[str, int]] = []
    lanes = HostLanes(owner="a", cap=2, queue_seconds=1.0, window=window, apply_caps=caps.append)
    lanes.caps_sent = caps  # type: ignore[attr-defined]
    return lanes


def claimed(url: str, n: int) -> ClaimedJob:
    now = db_now()
    return ClaimedJob(
        id=uuid4(),
        team_id=1,
        due_at=now,
        bucket=now,
        shard=n % 4,
        attempt=1,
        target_kind="webhook",
        target=url,
        payload={},
        metadata={},
        expires_at=None,
    )


def test_lanes_send_a_host_what_it_starts_soon_and_park_the_rest_in_order() -> None:
    lanes = lanes_build()
    jobs = [claimed("https://slow.example/h", n) for n in range(10)]
    assert lanes.split(jobs) == []  # no share yet: all wait for the first refresh
    assert lanes.refresh_due()
    lanes.refresh(db_now())
    assert lanes.caps_sent == [{"slow.example:443": 2}]  # type: ignore[attr-defined]
    first = lanes.ready()
    assert first == jobs[:4]  # share 2, and 2 more before any answer
    assert lanes.parked == 6 and lanes.excluded() == origin_patterns(["https://slow.example"])
    # Answers measure the host: 1 s each, so its share starts 2 more within queue_seconds.
    for job in first[:2]:
        lanes.answered(job, Outcome(job.id, "delivered", duration_seconds=1.0))
    assert lanes.ready() == jobs[4:6]
    assert lanes.excluded()  # still at its limit
    other = claimed("https://fast.example/h", 0)
    assert lanes.split([other]) == []  # a new host waits for its share, then goes
    lanes.refresh(db_now())
    assert lanes.ready() == [other]
    # The slow host's backlog drains: at half its limit it is taken in again.
    for job in jobs[2:6]:
        lanes.answered(job, Outcome(job.id, "delivered", duration_seconds=1.0))
        lanes.ready()
    sent = jobs[6:]
    for job in sent:
        lanes.answered(job, Outcome(job.id, "delivered", duration_seconds=1.0))
        lanes.ready()
    assert lanes.parked == 0 and lanes.excluded() == [] and lanes.freed


def test_a_host_that_may_fill_the_window_is_never_left_out() -> None:
    lanes = lanes_build(window=4)
    jobs = [claimed("https://fast.example/h", n) for n in range(6)]
    lanes.split(jobs)
    lanes.refresh(db_now())
    assert lanes.ready() == jobs[:4] and lanes.excluded() == []


class SilentSink:
    """Takes jobs and never answers: what is sent stays out, the rest stays parked."""

    def __init__(self) -> None:
        self.jobs: list = []

    def submit(self, jobs, done) -> None:
        self.jobs += jobs

    def close(self) -> None:
        """Nothing to release."""


def test_parked_jobs_are_handed_back_unwritten(team, settings) -> None:
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]
    base = future_base()
    ids = [
        job_schedule(
            team=team, due_at=base, target_kind="webhook", target="http://127.0.0.1:9/h", now=base
        )[0].id
        for _ in range(8)
    ]
    sink = SilentSink()
    poller = poller_build(sink=sink)
    poller.pipeline.hosts.cap = 1  # one at once, two in the transport: the rest park
    poller.pipeline.hosts.excluded = list  # read them all (one read a shard), not left out
    poller.iterate(now=base + timedelta(seconds=1), settle=False)
    pipeline = poller.pipeline
    parked = pipeline.hosts.parked
    assert parked >= 1 and pipeline.in_flight == parked + 2
    assert pipeline.release_parked() == parked and pipeline.hosts.parked == 0
    pipeline.write_back(base + timedelta(seconds=1))
    assert pipeline.in_flight == 2  # only what was sent is still out
    rows = list(Job.objects.filter(id__in=ids))
    assert all(r.status == "pending" and r.attempts == 0 and r.last_error == "" for r in rows)
    sent = {job.id for job in sink.jobs}
    assert len(sent) == 2
    for batch in InFlightBatch.objects.all():  # batches of released jobs alone are forgotten
        assert set(ids_parse(batch.job_ids)) & sent
