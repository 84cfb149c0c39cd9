"""The webhook sink against a real local HTTP receiver."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from polling.dispatch.base import ClaimedJob
from polling.dispatch.hostguard import HostGuard
from polling.dispatch.webhook import WebhookSink, retry_after_seconds
from tests.support.procs import free_port
from tests.support.receiver import running_receiver

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OLD_SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"


def claimed(url: str, *, team_id: int = 1, attempt: int = 1, payload=None) -> ClaimedJob:
    now = datetime.now(UTC)
    return ClaimedJob(
        id=uuid.uuid4(),
        team_id=team_id,
        due_at=now,
        bucket=now.replace(second=0, microsecond=0),
        shard=3,
        attempt=attempt,
        target_kind="webhook",
        target=url,
        payload=payload if payload is not None else {"hello": "world"},
        metadata={"booking": "b-1"},
        expires_at=None,
    )


@pytest.fixture
def allow_loopback(settings):
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["127.0.0.1"]


def make_sink(secrets=None, **kw) -> WebhookSink:
    lookup = secrets or (lambda ids: {i: [SECRET] for i in ids})
    return WebhookSink(secrets_for=lookup, **kw)


def test_signed_delivery_verifies_with_standardwebhooks(allow_loopback) -> None:
    with running_receiver() as rx:
        sink = make_sink()
        job = claimed(rx.url("/ok"), attempt=2)
        [outcome] = sink.deliver([job])
        sink.close()
    assert outcome.result == "delivered" and outcome.status_code == 200
    assert outcome.duration_seconds is not None and outcome.started_at is not None
    [request] = rx.requests
    assert request.headers["webhook-id"] == str(job.id)
    body = Webhook(SECRET).verify(request.body, request.headers)
    assert body == {
        "id": str(job.id),
        "due_at": job.due_at.isoformat().replace("+00:00", "Z"),
        "payload": {"hello": "world"},
        "attempt": 2,
        "metadata": {"booking": "b-1"},
    }
    with pytest.raises(WebhookVerificationError):
        Webhook(OLD_SECRET).verify(request.body, request.headers)


def test_a_flow_controlled_job_names_its_key_in_the_signed_body(allow_loopback) -> None:
    with running_receiver() as rx:
        sink = make_sink()
        job = claimed(rx.url("/ok"))
        job.flow_key = "tenant-42"
        plain = claimed(rx.url("/ok"))
        sink.deliver([job, plain])
        sink.close()
    bodies = {
        r.headers["webhook-id"]: Webhook(SECRET).verify(r.body, r.headers) for r in rx.requests
    }
    assert bodies[str(job.id)]["flow_control_key"] == "tenant-42"
    assert "flow_control_key" not in bodies[str(plain.id)]


def test_rotation_sends_both_signatures(allow_loopback) -> None:
    with running_receiver() as rx:
        sink = make_sink(lambda ids: {i: [SECRET, OLD_SECRET] for i in ids})
        [outcome] = sink.deliver([claimed(rx.url("/ok"))])
        sink.close()
    assert outcome.result == "delivered"
    [request] = rx.requests
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    Webhook(SECRET).verify(request.body, request.headers)
    Webhook(OLD_SECRET).verify(request.body, request.headers)


def test_a_kept_response_has_its_content_type_and_excerpt(allow_loopback) -> None:
    with running_receiver() as rx:
        sink = make_sink()
        job = claimed(rx.url("/typed"))
        job.request = {"capture_response": True}
        failing = claimed(rx.url("/busy"))
        outcomes = sink.deliver([job, failing])
        sink.close()
    kept, refused = outcomes
    assert (kept.result, kept.content_type, kept.excerpt) == (
        "delivered",
        "application/json; charset=utf-8",
        '{"ok":true}',
    )
    assert refused.excerpt == "slow down" and refused.retry_after_seconds == 7.0


def test_outcomes_by_status(allow_loopback) -> None:
    with running_receiver() as rx:
        sink = make_sink()
        paths = ["/ok", "/gone", "/busy", "/unavailable", "/fail", "/bad", "/redirect", "/missing"]
        outcomes = sink.deliver([claimed(rx.url(p)) for p in paths])
        sink.close()
    got = {
        p: (o.result, o.status_code, o.retry_after_seconds)
        for p, o in zip(paths, outcomes, strict=False)
    }
    assert got["/ok"] == ("delivered", 200, None)
    assert got["/gone"] == ("dead", 410, None)
    assert got["/busy"] == ("retry", 429, 7.0)
    assert got["/unavailable"][:2] == ("retry", 503) and got["/unavailable"][2] > 3600
    assert got["/fail"] == ("retry", 500, None)
    assert got["/bad"] == ("retry", 400, None)
    assert got["/redirect"] == ("retry", 302, None)  # never followed
    assert got["/missing"] == ("retry", 404, None)
    assert "/ok" in rx.paths() and rx.paths().count("/ok") == 1  # the redirect was not followed
    fail = outcomes[paths.index("/fail")]
    assert fail.error.startswith("HTTP 500: xxx") and len(fail.error) <= 300


def test_timeout_and_connection_refused_are_retries(allow_loopback) -> None:
    closed_port = free_port()
    with running_receiver() as rx:
        sink = make_sink(read_timeout=1)
        slow, refused = sink.deliver(
            [claimed(rx.url("/slow/4")), claimed(f"http://127.0.0.1:{closed_port}/x")]
        )
        sink.close()
    assert slow.result == "retry" and slow.error.startswith("timeout")
    assert refused.result == "retry" and "ConnectError" in refused.error


def test_connect_time_ssrf_guard(settings) -> None:
    """The check is on the address connected to, after resolution: a name whose DNS
    answer is internal (here ``localhost``, as a rebinding attacker's name would
    resolve at delivery time) is refused before a byte is sent."""
    settings.SENDLATER_CALLBACK_ALLOWLIST = []
    with running_receiver() as rx:
        sink = make_sink()
        literal, by_name, odd = sink.deliver(
            [
                claimed(rx.url("/ok")),
                claimed(f"http://localhost:{rx.port}/ok"),
                claimed(f"http://2130706433:{rx.port}/ok"),  # 127.0.0.1 spelled as one number
            ]
        )
        sink.close()
    for outcome in (literal, by_name, odd):
        assert outcome.result == "dead" and "loopback" in outcome.error, outcome
    assert rx.requests == []


def test_allowlisted_name_may_resolve_to_loopback(settings) -> None:
    settings.SENDLATER_CALLBACK_ALLOWLIST = ["localhost"]
    with running_receiver() as rx:
        sink = make_sink()
        [outcome] = sink.deliver([claimed(f"http://localhost:{rx.port}/ok")])
        sink.close()
    assert outcome.result == "delivered"
    assert rx.paths() == ["/ok"]


def test_slow_host_does_not_stall_others_and_breaker_opens(allow_loopback) -> None:
    guard = HostGuard(max_per_host=2, failure_threshold=3, cooldown=30, max_cooldown=60)
    with running_receiver() as slow_rx, running_receiver() as fast_rx:
        sink = make_sink(max_connections=8, guard=guard, read_timeout=1)
        jobs = [claimed(slow_rx.url("/slow/4")) for _ in range(12)]
        jobs += [claimed(fast_rx.url("/ok")) for _ in range(12)]
        t0 = time.monotonic()
        outcomes = sink.deliver(jobs)
        elapsed = time.monotonic() - t0
        sink.close()
    slow, fast = outcomes[:12], outcomes[12:]
    assert all(o.result == "delivered" for o in fast)
    # At most two in flight to the slow host. After three timeouts its breaker opened:
    # the rest failed fast without a request (retried after the cool-down), or were
    # handed back untried ("deferred", not an attempt) while they queued behind it.
    assert len(slow_rx.requests) <= 4
    assert {o.result for o in slow} <= {"retry", "deferred"}
    assert sum(o.error.startswith("timeout") for o in slow) >= 3
    assert any("circuit open" in o.error for o in slow)
    assert all(o.retry_after_seconds for o in slow if "circuit open" in o.error)
    assert elapsed < 4  # two rounds of 1 s timeouts, not twelve 4 s answers


def test_breaker_half_opens_after_cooldown() -> None:
    now = [0.0]
    guard = HostGuard(
        max_per_host=4, failure_threshold=2, cooldown=10, max_cooldown=40, clock=lambda: now[0]
    )
    for _ in range(2):
        with guard.slot("h:80") as trial:
            guard.record("h:80", ok=False, trial=trial)
    assert guard.is_open("h:80")
    with pytest.raises(Exception, match="circuit open"), guard.slot("h:80"):
        pass
    now[0] = 11
    with guard.slot("h:80") as trial:
        assert trial
        guard.record("h:80", ok=False, trial=trial)  # failed trial: cool-down doubles
    now[0] = 25
    with pytest.raises(Exception, match="circuit open"), guard.slot("h:80"):
        pass
    now[0] = 32
    with guard.slot("h:80") as trial:
        guard.record("h:80", ok=True, trial=trial)
    assert not guard.is_open("h:80")


def test_retry_after_parsing() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert retry_after_seconds("120", now) == 120
    assert retry_after_seconds("Thu, 01 Jan 2026 00:01:00 GMT", now) == 60
    assert retry_after_seconds("garbage", now) is None
    assert retry_after_seconds(None, now) is None
    assert retry_after_seconds("99999999", now) == 24 * 3600
    assert (
        retry_after_seconds((now - timedelta(hours=1)).strftime("%a, %d %b %Y %H:%M:%S GMT"), now)
        == 0
    )


@pytest.mark.django_db
def test_webhook_timestamp_and_started_at_come_from_the_database_clock(allow_loopback) -> None:
    """A poller anchors DB_TIME to the database's now each iteration; the sink signs
    with it, so a machine clock 10 minutes off (here: the database 10 minutes behind
    it) never reaches the receiver's ±5-minute check."""
    from polling.common.database_time import DB_TIME

    db_reading = datetime.now(UTC) - timedelta(minutes=10)
    DB_TIME.anchor(db_reading)
    with running_receiver() as rx:
        sink = make_sink()
        [outcome] = sink.deliver([claimed(rx.url("/ok"))])
        sink.close()
    [request] = rx.requests
    sent = int(request.headers["webhook-timestamp"])
    assert abs(sent - db_reading.timestamp()) < 3, sent - db_reading.timestamp()
    assert outcome.started_at is not None
    assert abs((outcome.started_at - db_reading).total_seconds()) < 3
    assert 0 <= outcome.duration_seconds < 3  # monotonic, whatever the offset
