"""The WSGI front door: a plain single-job create or read answered before Django's
request handling, everything else passed to Django as it came.

``POST /api/v1/jobs`` and ``GET /api/v1/jobs/{id}`` are most of the API's traffic.
Through Django each call also pays for the middleware chain (ten layers, most with
nothing to do on a key-authenticated JSON call), URL resolution and the view's
dispatch: ~0.2 ms of Python a call, as much as the single-job work itself
(docs/performance.md, "Single-job API calls"). The front door runs only what those
layers would do to such a call:

- before: the URL bound (``urllimit``), and ``process_request`` of the middleware
  that check a request (``SecurityMiddleware``: the HTTPS redirect;
  ``CommonMiddleware``: the host against ``ALLOWED_HOSTS``, denied user agents,
  ``PREPEND_WWW``). Any of them objecting (a redirect, an error) sends the request
  to Django untouched, which gives that answer;
- the call: ``scheduling.api.jobs.fastpath.answer`` with the view class the URL resolves
  to, as the view's own fast path runs it;
- after: ``process_response`` of the same middleware and ``XFrameOptionsMiddleware``
  in Django's order, the API request metrics, and the work of Django's
  ``request_finished`` receivers, but for the database connection, which the
  thread keeps for its next call while it is sound (``_finished``).

The middleware the front door leaves out are those that do nothing on these URLs:
sessions, the Django user and messages (skipped for ``/api/v1/`` anyway,
``apiroutes``), CSRF (the API's views are exempt and set no cookie), WhiteNoise
(static files only). A middleware in ``settings.MIDDLEWARE`` that the front door does
not know turns it off: every request then goes through Django, so adding one can
never be bypassed unnoticed (tests/api/test_front.py holds the two side by side).

When the call does not end in a plain answer (an unusual request, a key that does
not check, a body the plain validator is unsure of, over budget, any exception), the
request goes to Django with what was done so far: the body read (``wsgi.input``
rewound), the budget's verdict and the exception met (``fastpath.FRONT_TRIED``), so
nothing is counted twice and the answer is DRF's.
"""

from __future__ import annotations

import io
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.core.handlers.wsgi import WSGIHandler, WSGIRequest, get_script_name
from django.db import connections
from django.http import HttpResponseBase
from django.urls import Resolver404, resolve, set_script_prefix, set_urlconf
from django.utils.module_loading import import_string

from scheduling.api.jobs import fastpath, views
from sendlater_site.metrics import api_request_record
from sendlater_site.urllimit import url_too_long

StartResponse = Callable[..., Any]

_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # Django's <uuid:>
_JOBS = "/api/v1/jobs"
_JOB = re.compile(f"{_JOBS}/({_UUID})")

# What each middleware of settings.MIDDLEWARE does on the front door's calls.
CHECKS = "checks"  # its process_request, then its process_response
RESPONDS = "responds"  # its process_response only
IDLE = "idle"  # nothing on these URLs (see the module's docstring)
URL_LENGTH = "url length"
METRICS = "metrics"
MIDDLEWARE_ROLES = {
    "sendlater_site.urllimit.UrlLengthMiddleware": URL_LENGTH,
    "django.middleware.security.SecurityMiddleware": CHECKS,
    "whitenoise.middleware.WhiteNoiseMiddleware": IDLE,
    "sendlater_site.apiroutes.SessionMiddlewareExceptApi": IDLE,
    "django.middleware.common.CommonMiddleware": CHECKS,
    "django.middleware.csrf.CsrfViewMiddleware": IDLE,
    "sendlater_site.apiroutes.AuthenticationMiddlewareExceptApi": IDLE,
    "sendlater_site.apiroutes.MessageMiddlewareExceptApi": IDLE,
    "django.middleware.clickjacking.XFrameOptionsMiddleware": RESPONDS,
    "sendlater_site.metrics.ApiMetricsMiddleware": METRICS,
}


@dataclass(frozen=True)
class Route:
    """A URL the front door answers: its view, the fast-path handler, the metrics' label."""

    view_class: type
    handler: Callable[..., HttpResponseBase | None]
    endpoint: str


@dataclass(frozen=True)
class Plan:
    """How the front door runs, for one value of settings.MIDDLEWARE and ROOT_URLCONF;
    ``create`` None (the door closed) where it cannot be exact."""

    create: Route | None
    read: Route | None
    checking: tuple[Any, ...] = ()
    responding: tuple[Any, ...] = ()


class ApiFront:
    """WSGI application: the front door before ``app`` (Django's ``WSGIHandler``)."""

    def __init__(self, app: WSGIHandler) -> None:
        self.app = app
        self._plan: Plan | None = None
        self._planned_for: tuple[object, object] | None = None

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        route, kwargs = self._route(environ)
        if route is None:
            return self.app(environ, start_response)
        set_script_prefix(get_script_name(environ))
        request = WSGIRequest(environ)
        response = self._answer(route, request, kwargs)
        if response is None:
            return self.app(environ, start_response)
        request.close()
        _finished()
        headers = [*response.items()]
        headers += [("Set-Cookie", c.output(header="")) for c in response.cookies.values()]
        start_response(f"{response.status_code} {response.reason_phrase}", headers)
        return [response.content]

    def plan(self) -> Plan:
        """The plan for the current settings (made again when they change)."""
        planned_for = (settings.MIDDLEWARE, settings.ROOT_URLCONF)
        if self._plan is None or self._planned_for != planned_for:
            self._plan, self._planned_for = _plan_make(), planned_for
        return self._plan

    def _route(self, environ: dict[str, Any]) -> tuple[Route | None, dict[str, Any]]:
        if not settings.SENDLATER_API_FASTPATH or environ.get("QUERY_STRING"):
            return None, {}
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        if method == "POST" and path == _JOBS:
            return self.plan().create, {}
        if method == "GET" and (match := _JOB.fullmatch(path)) is not None:
            return self.plan().read, {"job_id": uuid.UUID(match[1])}
        return None, {}

    def _answer(
        self, route: Route, request: WSGIRequest, kwargs: dict[str, Any]
    ) -> HttpResponseBase | None:
        plan = self.plan()
        try:
            if url_too_long(request.META) or any(
                middleware.process_request(request) is not None for middleware in plan.checking
            ):
                return None  # a redirect: Django gives it
        except Exception:  # a host not allowed, a denied user agent: Django answers
            return None
        started = time.perf_counter()
        view = route.view_class()
        view.setup(request, **kwargs)  # as View.as_view() does (e.g. HEAD where GET is)
        try:
            response = fastpath.answer(view, request, route.handler, **kwargs)
        except Exception as exc:  # answered by DRF, from the state the call left
            setattr(request, fastpath.FRONT_ERROR, exc)
            response = None
        if response is None:
            _hand_on(request)
            return None
        for middleware in plan.responding:
            response = middleware.process_response(request, response)
        api_request_record(route.endpoint, request.method, response.status_code, started)
        return response


def _finished() -> None:
    """What Django's ``request_finished`` receivers do after a request, but for the
    thread's database connection: it stays with the thread for its next call rather
    than going back to the pool and being lent again at once (~10 % of a create's
    CPU, docs/performance.md). One that saw an error, is inside a transaction, or
    is past ``CONN_MAX_AGE`` (without a pool) is closed or handed back as Django
    would; and the next request through Django returns it as after any request. A
    transaction still open is not the call's (every atomic block of a call has ended
    by its answer) but its caller's, e.g. a test's: it is left to its owner."""
    for conn in connections.all(initialized_only=True):
        if conn.in_atomic_block:
            continue
        obsolete = getattr(conn, "pool", None) is None and conn.close_at is not None
        obsolete = obsolete and time.monotonic() >= conn.close_at
        if conn.errors_occurred or not conn.get_autocommit() or obsolete:
            conn.close_if_unusable_or_obsolete()
    caches.close_all()
    set_urlconf(None)


def _hand_on(request: WSGIRequest) -> None:
    """Leave the request in its environ for Django: its state, and the body again."""
    environ = request.environ
    environ[fastpath.FRONT_TRIED] = request
    if hasattr(request, "_body"):  # read from wsgi.input: Django reads this copy
        environ["wsgi.input"] = io.BytesIO(request._body)


def _plan_make() -> Plan:
    checking, responding = [], []
    for dotted in settings.MIDDLEWARE:
        role = MIDDLEWARE_ROLES.get(dotted)
        if role is None:
            return Plan(create=None, read=None)  # unknown: every request to Django
        if role in (CHECKS, RESPONDS):
            middleware = import_string(dotted)(_never_called)
            if role == CHECKS:
                checking.append(middleware)
            responding.insert(0, middleware)  # responses pass back in reverse order
    set_urlconf(settings.ROOT_URLCONF)
    create = _route_make(_JOBS, views.JobListCreateView, fastpath.job_create)
    read = _route_make(f"{_JOBS}/{uuid.UUID(int=0)}", views.JobDetailView, fastpath.job_read)
    return Plan(create=create, read=read, checking=tuple(checking), responding=tuple(responding))


def _route_make(path: str, view_class: type, handler: Callable[..., Any]) -> Route | None:
    """The route for ``path`` if the URLconf sends it to ``view_class`` (else None)."""
    try:
        match = resolve(path)
    except Resolver404:
        return None
    if getattr(match.func, "view_class", None) is not view_class:
        return None
    return Route(view_class=view_class, handler=handler, endpoint=match.route)


def _never_called(request: Any) -> Any:
    raise AssertionError("the front door calls process_request/process_response only")
