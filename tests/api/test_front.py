"""The WSGI front door (sendlater_site/apifront.py) against Django's whole stack.

Each case goes through the project's WSGI application twice from the same state:
with the fast path on (the front door answers a plain create or read) and off
(every request through Django's middleware, URL resolution and DRF). Status,
headers and body bytes must be the same, the new job's id, shard and times masked.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
import time_machine
from django.conf import settings
from django.db import OperationalError
from django.test import RequestFactory, override_settings

from scheduling.metrics import API_REQUESTS
from scheduling.models import IdempotencyKey, Job
from scheduling.storage import jobinsert
from tests.support.api import job_body, mask_varying

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs"
Answer = tuple[int, list[tuple[str, str]], bytes]


@pytest.fixture
def app() -> Iterator[Any]:
    """The project's WSGI application (the front door before Django), minus the signal
    that closes the DB connection after each request, as Django's test client does:
    the test's transaction is it."""
    from django.core import signals
    from django.db import close_old_connections

    from sendlater_site.wsgi import application

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield application
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def call(
    app: Any, method: str, path: str, key: str | None, body: Any = None, **meta: Any
) -> Answer:
    """One request through ``app``: status, headers, body."""
    raw = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    extra = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}
    environ = (
        RequestFactory()
        .generic(
            method,
            path,
            raw or b"",
            content_type="application/json" if raw is not None else None,
            **extra,
            **meta,
        )
        .environ
    )
    if raw is None:
        environ.pop("CONTENT_TYPE", None)
    started: list[Any] = []
    result = app(environ, lambda status, headers, exc_info=None: started.append((status, headers)))
    try:
        content = b"".join(result)
    finally:
        getattr(result, "close", lambda: None)()
    status, headers = started[0]
    return int(status.split()[0]), headers, content


def masked(answer: Answer) -> Answer:
    status, headers, content = answer
    shown = [
        (name, mask_varying(value.encode()).decode() if name != "Content-Length" else "*")
        for name, value in headers
    ]
    return status, sorted(shown), mask_varying(content)


def both(send: Callable[[], Answer], undo: Callable[[], None] = lambda: None) -> Answer:
    """``send()`` through Django alone, ``undo()``, then through the front door; the
    answers must be the same. Returns the front door's."""
    with override_settings(SENDLATER_API_FASTPATH=False):
        through_django = send()
    undo()
    front = send()
    assert masked(front) == masked(through_django)
    return front


def drop_new_jobs(keep: set[str]) -> Callable[[], None]:
    def undo() -> None:
        Job.objects.exclude(id__in=keep).delete()
        IdempotencyKey.objects.exclude(job_id__in=keep).delete()

    return undo


def front_answers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Status of each answer the front door gave itself from now on."""
    from sendlater_site import apifront

    given: list[int] = []
    original = apifront.ApiFront._answer

    def spy(self: Any, *args: Any) -> Any:
        response = original(self, *args)
        if response is not None:
            given.append(response.status_code)
        return response

    monkeypatch.setattr(apifront.ApiFront, "_answer", spy)
    return given


def test_a_plain_create_and_read_are_answered_by_the_front_door_as_by_django(
    app, api, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = front_answers(monkeypatch)
    key, body = api.api_key, job_body()
    status, headers, content = both(lambda: call(app, "POST", URL, key, body), drop_new_jobs(set()))
    assert status == 201
    job_id = json.loads(content)["id"]
    assert dict(headers)["Location"] == f"{URL}/{job_id}"
    # Django's middleware headers are there (security, clickjacking, the length).
    assert {"X-Frame-Options", "X-Content-Type-Options", "Content-Length"} <= dict(headers).keys()
    read = both(lambda: call(app, "GET", f"{URL}/{job_id}", key))
    assert read[0] == 200 and json.loads(read[2])["id"] == job_id
    webhook = job_body(callback_url="https://example.com/h", metadata={"a": "b"})
    webhook.pop("handler")
    both(lambda: call(app, "POST", URL, key, webhook), drop_new_jobs({job_id}))
    assert given == [201, 200, 201]


@pytest.mark.parametrize(
    ("method", "path", "body", "meta", "status"),
    [
        ("POST", URL, {"due_at": "soon", "handler": "noop"}, {}, 400),
        ("POST", URL, b"{not json", {}, 400),
        ("POST", URL, {"due_at": "2030-01-01T00:00:00Z", "handler": "no-such"}, {}, 400),
        ("GET", f"{URL}/{uuid.UUID(int=7)}", None, {}, 404),
        ("GET", f"{URL}/{uuid.UUID(int=7)}", None, {"HTTP_ACCEPT": "text/html"}, 406),
        ("GET", f"{URL}?limit=1", None, {}, 200),
    ],
)
def test_what_the_front_door_does_not_answer_itself_is_django_s_answer(
    app, api, monkeypatch: pytest.MonkeyPatch, method, path, body, meta, status
) -> None:
    given = front_answers(monkeypatch)
    answer = both(lambda: call(app, method, path, api.api_key, body, **meta))
    assert answer[0] == status
    assert given == []


def test_a_host_not_allowed_is_refused_as_by_django(app, api, monkeypatch) -> None:
    given, body = front_answers(monkeypatch), job_body()
    answer = both(lambda: call(app, "POST", URL, api.api_key, body, HTTP_HOST="evil.example"))
    assert answer[0] == 400 and given == []
    assert not Job.objects.exists()


def test_unknown_and_revoked_keys_and_no_key_answer_401_as_django(app, api) -> None:
    body = job_body()
    assert both(lambda: call(app, "POST", URL, "sl_nope_nope", body))[0] == 401
    assert both(lambda: call(app, "GET", f"{URL}/{uuid.UUID(int=1)}", None))[0] == 401


@pytest.mark.usefixtures("app")  # (for its signals: a new application is made here)
def test_plain_http_is_redirected_to_https_as_by_django(api) -> None:
    from django.core.wsgi import get_wsgi_application

    from sendlater_site.apifront import ApiFront

    body = job_body()
    with override_settings(SECURE_SSL_REDIRECT=True):  # read as the middleware is built
        app = ApiFront(get_wsgi_application())
        status, headers, _ = both(lambda: call(app, "POST", URL, api.api_key, body))
        secure = call(app, "POST", URL, api.api_key, body, **{"wsgi.url_scheme": "https"})
    assert status == 301 and dict(headers)["Location"].startswith("https://")
    assert secure[0] == 201


def test_over_budget_is_counted_once_and_answered_429_as_by_django(app, api) -> None:
    key = api.api_key
    created = call(app, "POST", URL, key, job_body())
    job_id = json.loads(created[2])["id"]
    two = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"jobs": "2/min"}}
    mid_minute = datetime.now(UTC).replace(second=30, microsecond=0) + timedelta(minutes=1)
    with override_settings(REST_FRAMEWORK=two), time_machine.travel(mid_minute, tick=False):
        statuses = [
            call(app, "POST", URL, key, {"due_at": "never"})[0],  # to DRF, counted there
            call(app, "GET", f"{URL}/{job_id}", key)[0],
            call(app, "POST", URL, key, job_body())[0],
            call(app, "GET", f"{URL}/{job_id}", key)[0],
        ]
    assert statuses == [400, 200, 429, 429]
    assert Job.objects.count() == 1  # the refused create wrote nothing


def test_the_location_carries_the_script_name(app, api) -> None:
    status, headers, content = call(app, "POST", URL, api.api_key, job_body(), SCRIPT_NAME="/sl")
    assert status == 201
    assert dict(headers)["Location"] == f"/sl{URL}/{json.loads(content)['id']}"


def test_a_database_error_in_the_front_door_is_answered_once_by_django(
    app, api, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[str] = []

    def lost(*args: Any, **kwargs: Any) -> Any:
        writes.append("insert")
        raise OperationalError("server closed the connection unexpectedly")

    with (
        mock.patch.object(jobinsert, "prepared_fetchone", side_effect=lost),
        mock.patch("scheduling.jobs.services.jobs_insert", side_effect=lost),
    ):
        status, headers, content = call(app, "POST", URL, api.api_key, job_body())
    assert status == 503 and dict(headers)["Retry-After"] == "2"
    assert json.loads(content)["error"]["code"] == "unavailable"
    assert writes == ["insert"]  # Django answered from the error, without a second try
    assert call(app, "POST", URL, api.api_key, job_body())[0] == 201


def test_a_body_the_front_door_read_reaches_django_whole(app, api) -> None:
    # A body the plain validator is unsure of goes on to DRF after the front door read it.
    body = job_body(payload={"n": 1}, unknown_field=1)  # (one body for both: same due_at)
    status, _, content = both(lambda: call(app, "POST", URL, api.api_key, body))
    assert status == 400 and b"unknown_field" in content


def test_front_door_calls_are_counted_in_the_api_metrics(app, api) -> None:
    def seen(method: str, status: str, route: str) -> float:
        value = API_REQUESTS.labels(route, method, status)._value.get()  # type: ignore[attr-defined]
        return float(value)

    before = seen("POST", "201", "api/v1/jobs"), seen("GET", "200", "api/v1/jobs/<uuid:job_id>")
    created = call(app, "POST", URL, api.api_key, job_body())
    call(app, "GET", f"{URL}/{json.loads(created[2])['id']}", api.api_key)
    after = seen("POST", "201", "api/v1/jobs"), seen("GET", "200", "api/v1/jobs/<uuid:job_id>")
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)


def test_a_middleware_the_front_door_does_not_know_closes_it(app, api, monkeypatch) -> None:
    given = front_answers(monkeypatch)
    middleware = [*settings.MIDDLEWARE, "django.middleware.gzip.GZipMiddleware"]
    with override_settings(MIDDLEWARE=middleware):
        from sendlater_site.apifront import ApiFront

        assert ApiFront(app.app).plan().create is None
        assert call(app, "POST", URL, api.api_key, job_body())[0] == 201
    assert given == []  # Django (with the new middleware) answered


def test_every_middleware_of_the_settings_has_a_role() -> None:
    from sendlater_site.apifront import MIDDLEWARE_ROLES

    assert set(settings.MIDDLEWARE) == set(MIDDLEWARE_ROLES)


def test_the_fast_path_off_leaves_everything_to_django(app, api, monkeypatch) -> None:
    given = front_answers(monkeypatch)
    with override_settings(SENDLATER_API_FASTPATH=False):
        assert call(app, "POST", URL, api.api_key, job_body())[0] == 201
    assert given == []
