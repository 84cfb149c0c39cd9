"""The receiver helper: verify() and the Django decorator's exactly-once effect."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps
from django.db import connection, connections
from django.http import HttpResponse
from django.test import RequestFactory
from sendlater_client import InvalidSignature, verify
from standardwebhooks.webhooks import Webhook

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OLD_SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
BODY = '{"job_id": "j1", "attempt": 1, "payload": {"n": 1}}'


def signed(body: str = BODY, *, secret: str = SECRET, msg_id: str = "msg_1", at=None):
    at = at or datetime.now(UTC)
    sig = Webhook(secret).sign(msg_id, at, body)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": sig,
    }


def test_verify_accepts_a_signed_body() -> None:
    assert verify(BODY.encode(), signed(), SECRET)["job_id"] == "j1"


def test_verify_refuses_a_forged_signature() -> None:
    with pytest.raises(InvalidSignature):
        verify(BODY, signed(secret="whsec_" + "A" * 43 + "="), SECRET)
    headers = signed()
    with pytest.raises(InvalidSignature):
        verify(BODY.replace("1", "2"), headers, SECRET)


def test_verify_refuses_a_stale_timestamp() -> None:
    with pytest.raises(InvalidSignature):
        verify(BODY, signed(at=datetime.now(UTC) - timedelta(minutes=10)), SECRET)


def test_verify_accepts_either_secret_during_a_rotation() -> None:
    assert verify(BODY, signed(secret=OLD_SECRET), [SECRET, OLD_SECRET])
    with pytest.raises(InvalidSignature):
        verify(BODY, signed(secret=OLD_SECRET), [SECRET])


needs_app = pytest.mark.skipif(
    not apps.is_installed("sendlater_client.django"),
    reason="SENDLATER_EXTRA_APPS=sendlater_client.django (make test) installs the receiver app",
)

EFFECTS: list[str] = []


def _view():
    from sendlater_client.django.decorators import sendlater_webhook

    @sendlater_webhook(secrets=[SECRET, OLD_SECRET])
    def receive(request, event):
        from django.contrib.auth.models import Group

        Group.objects.create(name=f"effect-{event['job_id']}-{len(EFFECTS)}")
        EFFECTS.append(event["job_id"])
        time.sleep(0.2)  # widen the window in which a duplicate arrives
        return HttpResponse(status=204)

    return receive


def _post(view, headers, body: str = BODY):
    meta = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
    request = RequestFactory().post("/hook", data=body, content_type="application/json", **meta)
    return view(request)


@needs_app
@pytest.mark.django_db
def test_decorator_runs_once_per_webhook_id_and_refuses_forgeries() -> None:
    from django.contrib.auth.models import Group

    EFFECTS.clear()
    view = _view()
    headers = signed(msg_id="msg_once")
    assert _post(view, headers).status_code == 204
    assert _post(view, headers).status_code == 200
    assert _post(view, signed(secret="whsec_" + "B" * 43 + "=", msg_id="x")).status_code == 401
    assert Group.objects.filter(name__startswith="effect-").count() == 1


@needs_app
@pytest.mark.django_db
def test_a_failing_view_leaves_the_id_unrecorded() -> None:
    from sendlater_client.django.decorators import sendlater_webhook
    from sendlater_client.django.models import ProcessedWebhook

    @sendlater_webhook(secrets=SECRET)
    def broken(request, event):
        return HttpResponse(status=503)

    assert _post(broken, signed(msg_id="msg_fail")).status_code == 503
    assert not ProcessedWebhook.objects.filter(webhook_id="msg_fail").exists()


@needs_app
@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent writers: PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_run_the_effect_once() -> None:
    from django.contrib.auth.models import Group

    EFFECTS.clear()
    view = _view()
    headers = signed(msg_id="msg_race")
    barrier = threading.Barrier(4)
    statuses: list[int] = []

    def deliver() -> None:
        try:
            barrier.wait()
            statuses.append(_post(view, headers).status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200, 200, 200, 204]
    assert Group.objects.filter(name__startswith="effect-").count() == 1
