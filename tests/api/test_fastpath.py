"""The single-job fast path against DRF: the same request, answered both ways, must get
the same status, headers and body bytes (scheduling/api/jobs/fastpath.py).

Each case is sent twice, once with the fast path on and once with it off
(``SENDLATER_API_FASTPATH``), starting from the same state. A create answers with
a new id, its shard and the clock's times, so those (and only those) are masked
before the bytes are compared; a read is compared as is.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.test import override_settings
from django.urls import set_script_prefix
from rest_framework.test import APIClient
from rest_framework.views import APIView

from scheduling.models import ApiKey, IdempotencyKey, Job
from scheduling.sharding.clock import db_now
from scheduling.teams import api_key_cache_clear
from tests.support.api import iso, job_body
from tests.support.api import mask_varying as _mask

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs"


def _answer(response: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    # Content-Length follows the masked times' lengths (isoformat drops zero microseconds).
    assert response["Content-Length"] == str(len(response.content))
    headers = [
        (name, _mask(value.encode()).decode() if name != "Content-Length" else "*")
        for name, value in response.items()
    ]
    return response.status_code, headers, _mask(response.content)


def both(call: Callable[[], Any], undo: Callable[[], None] = lambda: None) -> Any:
    """``call()`` through DRF, ``undo()``, then through the fast path; the answers must
    be the same. Returns the fast path's response."""
    with override_settings(SENDLATER_API_FASTPATH=False):
        through_drf = call()
    undo()
    fast = call()
    assert _answer(fast) == _answer(through_drf)
    return fast


def drf_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the requests DRF's dispatch saw from now on."""
    seen: list[str] = []
    original = APIView.initialize_request

    def spy(self: APIView, request: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(f"{request.method} {request.path}")
        return original(self, request, *args, **kwargs)

    monkeypatch.setattr(APIView, "initialize_request", spy)
    return seen


def _drop_new_jobs(keep: set[uuid.UUID]) -> Callable[[], None]:
    """Undo creates: every job not in ``keep``, and its idempotency key."""

    def undo() -> None:
        Job.objects.exclude(id__in=keep).delete()
        IdempotencyKey.objects.exclude(job_id__in=keep).delete()

    return undo


def post(api: Any, body: Any, **extra: Any) -> Callable[[], Any]:
    if isinstance(body, bytes | str):
        extra.setdefault("content_type", "application/json")
        return lambda: api.generic("POST", URL, body, **extra)
    return lambda: api.post(URL, body, format="json", **extra)


def test_plain_create_and_read_skip_drf_and_answer_as_drf_does(
    api, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = drf_calls(monkeypatch)
    created = both(post(api, job_body()), _drop_new_jobs(set()))
    assert created.status_code == 201
    job_id = created.json()["id"]
    webhook = job_body(callback_url="https://example.com/h", metadata={"a": "b"})
    webhook.pop("handler")
    both(post(api, webhook), _drop_new_jobs({uuid.UUID(job_id)}))
    read = both(lambda: api.get(f"{URL}/{job_id}"))
    assert read.status_code == 200 and read.json()["id"] == job_id
    drf = {f"POST {URL}", f"GET {URL}/{job_id}"}
    # One DRF dispatch per case: the run with the fast path off.
    assert seen == [f"POST {URL}", f"POST {URL}", f"GET {URL}/{job_id}"] and set(seen) == drf


def test_every_job_field_and_odd_values_read_the_same(api) -> None:
    body = job_body(
        payload={"f": 1.5e16, "big": 2**70, "s": "é\u2028\u2029", "l": [None, True, 0.1]},
        metadata={"k": "v", "empty": ""},
        idempotency_key="k-odd",
        expires_after_seconds=3600,
        flow_control_key="partner-é",
    )
    created = both(post(api, body), _drop_new_jobs(set()))
    assert created.status_code == 201
    both(lambda: api.get(f"{URL}/{created.json()['id']}"))


def test_the_location_carries_the_script_prefix(api) -> None:
    # Under gunicorn the handler sets the prefix from SCRIPT_NAME; the test client does not.
    set_script_prefix("/sl/")
    try:
        created = both(post(api, job_body()), _drop_new_jobs(set()))
    finally:
        set_script_prefix("/")
    assert created["Location"] == f"/sl/api/v1/jobs/{created.json()['id']}"
    plain = api.post(URL, job_body(), format="json")
    assert plain["Location"] == f"/api/v1/jobs/{plain.json()['id']}"


def test_idempotent_replay_and_conflict_answer_the_same(api) -> None:
    body = job_body(idempotency_key="booking-42")
    first = api.post(URL, body, format="json")
    assert first.status_code == 201
    replay = both(post(api, body))
    assert replay.status_code == 200 and replay["Idempotent-Replayed"] == "true"
    conflict = both(post(api, {**body, "payload": {"n": 2}}))
    assert conflict.status_code == 409


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"[]",
        b"null",
        b'"text"',
        b'{"due_at": "2027-03-01T09:00:00Z", "handler": "noop", "payload": 1e400}',
        b'{"due_at": "2027-03-01T09:00:00Z", "handler": "noop", "payload": "\\u0000"}',
        b'{"due_at": "2027-03-01T09:00:00Z", "handler": "noop", "payload": "\\ud800"}',
        b'{"due_at": "2027-03-01T09:00:00Z", "handler": "noop", "payload": NaN}',
        b"\xff\xfe",
        b'\xef\xbb\xbf{"due_at": "2027-03-01T09:00:00Z", "handler": "noop"}',
    ],
)
def test_bodies_that_are_not_plain_json_answer_the_same(api, body: bytes) -> None:
    response = both(post(api, body), _drop_new_jobs(set()))
    assert response.status_code in (201, 400)


REMOVE = object()


@pytest.mark.parametrize(
    "change",
    [
        {"due_at": REMOVE},
        {"due_at": "2027-03-01T09:00:00"},
        {"due_at": "tomorrow"},
        {"due_at": "2999-01-01T00:00:00Z"},
        {"due_at": 12},
        {"handler": REMOVE},
        {"handler": ""},
        {"handler": "no-such-handler"},
        {"handler": 7},
        {"callback_url": "https://example.com/h"},
        {"handler": REMOVE, "callback_url": "ftp://example.com/x"},
        {"handler": REMOVE, "callback_url": "http://127.0.0.1/x"},
        {"handler": REMOVE, "callback_url": "http://localhost/x"},
        {"handler": None},
        {"payload": None},
        {"metadata": {"k": 1}},
        {"metadata": {"": "v"}},
        {"metadata": []},
        {"window_seconds": -1},
        {"window_seconds": 12.5},
        {"window_seconds": "3"},
        {"expires_after_seconds": None},
        {"idempotency_key": ""},
        {"flow_control_key": ""},
        {"flow_control_key": "a/b"},
        {"flow_control_key": "k" * 101},
        {"flow_control_key": 5},
        {"unknown": 1},
    ],
)
def test_invalid_creates_answer_the_same(api, change: dict[str, Any]) -> None:
    body = {k: v for k, v in {**job_body(), **change}.items() if v is not REMOVE}
    both(post(api, body), _drop_new_jobs(set()))


@override_settings(SENDLATER_CALLBACK_ALLOWLIST=["10.0.0.0/8"])
def test_an_address_outside_an_allowlisted_network_answers_the_same(api) -> None:
    for url in ("http://10.1.2.3/x", "http://192.168.1.1/x"):
        body = {"due_at": job_body()["due_at"], "callback_url": url}
        both(post(api, body), _drop_new_jobs(set()))


def test_unusual_requests_answer_the_same(api) -> None:
    body = json.dumps(job_body()).encode()
    job_id = api.post(URL, json.loads(body), format="json").json()["id"]
    keep = _drop_new_jobs({uuid.UUID(job_id)})
    for headers in (
        {"HTTP_ACCEPT": "text/html"},
        {"HTTP_ACCEPT": "application/json; indent=4"},
        {"HTTP_ACCEPT": "application/json, */*"},
        {"HTTP_ACCEPT": "application/xml"},
        {"HTTP_ACCEPT": "*/*"},
    ):
        both(post(api, body, **headers), keep)
        both(lambda headers=headers: api.get(f"{URL}/{job_id}", **headers))
    for query in ("?format=json", "?format=xml", "?x=1"):
        both(lambda query=query: api.generic("POST", URL + query, body, "application/json"), keep)
        both(lambda query=query: api.get(f"{URL}/{job_id}{query}"))
    keyless = APIClient()  # a client's credentials would override the headers below
    for headers in (
        {},
        {"HTTP_AUTHORIZATION": ""},
        {"HTTP_AUTHORIZATION": "Bearer"},
        {"HTTP_AUTHORIZATION": "Bearer a b"},
        {"HTTP_AUTHORIZATION": "Token sl_x"},
        {"HTTP_AUTHORIZATION": "Bearer sl_unknown"},
        {"HTTP_AUTHORIZATION": "Bearer sl_\u00e9"},
        {"HTTP_AUTHORIZATION": f"bearer  {api.api_key}"},
        {"HTTP_AUTHORIZATION": f"Bearer {api.api_key}"},
    ):
        both(post(keyless, body, **headers), keep)
        both(lambda headers=headers: keyless.get(f"{URL}/{job_id}", **headers))
    for content_type in (
        "text/plain",
        "application/json; charset=latin-1",
        "application/json; charset=utf-8",
        "application/x",
    ):
        both(post(api, body, content_type=content_type), keep)


def test_missing_and_other_teams_jobs_answer_the_same(api, other_api) -> None:
    job_id = api.post(URL, job_body(), format="json").json()["id"]
    for path in (f"{URL}/{job_id}", f"{URL}/{uuid.uuid4()}"):
        response = both(lambda path=path: other_api.get(path))
        assert response.status_code == 404


def test_a_revoked_key_answers_the_same(api) -> None:
    job_id = api.post(URL, job_body(), format="json").json()["id"]
    ApiKey.objects.update(revoked_at=db_now())
    api_key_cache_clear()
    assert both(lambda: api.get(f"{URL}/{job_id}")).status_code == 401
    assert both(post(api, job_body())).status_code == 401


@override_settings(SENDLATER_MAX_REQUEST_BYTES=200)
def test_a_body_over_the_limit_answers_the_same(api) -> None:
    response = both(post(api, job_body(payload={"x": "y" * 300})))
    assert response.status_code == 413


def test_over_budget_answers_the_same(api) -> None:
    job_id = api.post(URL, job_body(), format="json").json()["id"]
    none_left = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"jobs": "0/min"}}
    mid_minute = datetime.now(UTC).replace(second=30, microsecond=0)
    with override_settings(REST_FRAMEWORK=none_left), time_machine.travel(mid_minute, tick=False):
        read = both(lambda: api.get(f"{URL}/{job_id}"))
        create = both(post(api, job_body()))
    assert read.status_code == create.status_code == 429
    assert read["Retry-After"] == "30"


def test_the_budget_counts_each_fast_call_once(api) -> None:
    job_id = api.post(URL, job_body(), format="json").json()["id"]
    three = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"jobs": "3/min"}}
    # A window of its own: the create above counted in this minute's.
    mid_minute = datetime.now(UTC).replace(second=30, microsecond=0) + timedelta(minutes=1)
    with override_settings(REST_FRAMEWORK=three), time_machine.travel(mid_minute, tick=False):
        statuses = [
            api.get(f"{URL}/{job_id}").status_code,
            api.post(
                URL, {"due_at": iso(db_now() + timedelta(hours=1))}, format="json"
            ).status_code,
            api.post(URL, job_body(), format="json").status_code,
            api.get(f"{URL}/{job_id}").status_code,
        ]
    # The invalid create went on to DRF after it was counted, and was not counted again.
    assert statuses == [200, 400, 201, 429]
