"""The single-job create and read without DRF's per-request machinery.

``POST /api/v1/jobs`` and ``GET /api/v1/jobs/{id}`` are most of the API's traffic.
Through DRF each builds a Request, negotiates content, runs authentication,
permission and throttle objects, validates with a serializer and renders through a
TemplateResponse: ~0.5 ms of Python per call, more than the database work
(docs/performance.md, "Single-job API calls"). Here the common request is answered
directly with the same steps in the same order and the same functions underneath:
the key check (``teams.api_key_check``, with its per-process cache), the team's
budget (``throttling``; a read on PostgreSQL counts it in the statement that reads
the job, ``ratelimit.count_request_and_read_job``, and a create sends its count and
its INSERT in one round trip, ``_create_in_one_trip``), the body parsed by the API's
parser function and checked by the bulk endpoint's plain validator, the same
service or selector, ``job_body`` rendered by DRF's own JSON renderer, the same
headers.

Everything else goes to DRF, so its answers stay DRF's:

- anything unusual about the request (an ``Accept`` that is not plainly JSON, a query
  string, no or a malformed or unknown key, a body that is not small JSON) before
  anything is counted: the view's ``dispatch`` runs as ever;
- a request over its budget, or a create body the plain validator is not sure of,
  after it was counted: DRF runs with ``request.sendlater_spent`` holding the
  verdict, which the throttle takes instead of counting again;
- an error raised by the service or selector: DRF's ``handle_exception`` and
  ``finalize_response`` shape it, as when a view method raises.

tests/api/test_fastpath.py holds both paths side by side: same status, headers and
body bytes, errors included.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from datetime import UTC
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.urls import get_script_prefix, reverse
from django.utils import timezone
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from scheduling import conf, netguard, tracing
from scheduling.api.access import ratelimit
from scheduling.api.access.auth import TeamPrincipal
from scheduling.api.access.throttling import Budget, Spent, budget_of, budget_spend
from scheduling.api.jobs.bodies import job_body
from scheduling.api.jobs.bulkplain import job_create_plain
from scheduling.api.jobs.serializers import job_spec_from, target_field
from scheduling.api.parsers import json_loads
from scheduling.jobs import selectors, services
from scheduling.jobs.specs import JobSpec
from scheduling.models import Job, Team
from scheduling.storage.prepared import prepared_pipeline
from scheduling.teams import api_key_check

logger = logging.getLogger(__name__)

REPLAY_HEADER = "Idempotent-Replayed"
# The trace context a created job keeps, answered so the caller can find its trace
# (W3C names: a job created without one gets one when tracing is on).
TRACEPARENT_HEADER = "traceparent"
TRACESTATE_HEADER = "tracestate"
# Accept values DRF answers with its JSON renderer and no media-type parameters
# (``; indent=4`` would change the body).
_JSON_ACCEPTS = frozenset({"*/*", "application/json", "application/*"})
_JSON_CONTENT_TYPES = frozenset({"application/json", "application/json; charset=utf-8"})
_RENDERER = JSONRenderer()

# What a handler returns to send the request on to DRF (the budget already spent).
TO_DRF = None
# The front door's request object, in the environ of a request it hands on to Django,
# and the attribute holding the exception it met.
FRONT_TRIED = "sendlater.front_tried"
FRONT_ERROR = "sendlater_error"


def serve(
    view: APIView,
    request: HttpRequest,
    handler: Callable[..., HttpResponseBase | None],
    **kwargs: Any,
) -> HttpResponseBase | None:
    """Answer ``request`` through ``handler``, or return None for the view's DRF dispatch.

    ``handler(view, request, team, **kwargs)`` runs once the key is checked; it counts
    the request (``spend``) first, then returns the response, or ``TO_DRF``. Its
    exceptions are answered as DRF answers a view method's. A request the front door
    (``sendlater_site/apifront.py``) already tried goes on from where it stopped.
    """
    if not settings.SENDLATER_API_FASTPATH:
        return None
    tried = request.META.pop(FRONT_TRIED, None)
    if tried is not None:
        return _resume(view, request, tried, kwargs)
    try:
        return answer(view, request, handler, **kwargs)
    except Exception as exc:  # answered (or re-raised) as DRF would
        return drf_exception_response(view, request, exc, kwargs)


def answer(
    view: APIView,
    request: HttpRequest,
    handler: Callable[..., HttpResponseBase | None],
    **kwargs: Any,
) -> HttpResponseBase | None:
    """``serve`` without the exception handling: the response, None for DRF, or the
    handler's exception."""
    # The key check may query (a cache miss): a failover there answers 503 as in
    # DRF, whose authentication runs inside its own exception handling.
    principal = _principal(request)
    if principal is None:
        return None
    request.user = principal  # type: ignore[assignment]  # as DRF's authentication sets it
    return handler(view, request, principal.team, **kwargs)


def _resume(
    view: APIView, request: HttpRequest, tried: HttpRequest, kwargs: dict[str, Any]
) -> HttpResponseBase | None:
    """The view's answer to a request the front door handed on: the state it left on its
    own request object (the caller, the budget's verdict, the names of the body's
    fields) carried over, then its exception answered, or DRF."""
    state = vars(tried)
    for name in ("user", "sendlater_spent", "sendlater_context"):
        if name in state:
            setattr(request, name, state[name])
    error = state.get(FRONT_ERROR)
    if error is not None:
        return drf_exception_response(view, request, error, kwargs)
    return None


def spent(request: HttpRequest, verdict: Spent) -> bool:
    """Record the request's budget verdict (DRF's throttle takes it, should the request
    go on to DRF) and return whether the request may proceed."""
    request.sendlater_spent = verdict  # type: ignore[attr-defined]
    return verdict.allowed


def _principal(request: HttpRequest) -> TeamPrincipal | None:
    """The caller, for a plain JSON request with a valid key; None sends it to DRF."""
    meta = request.META
    if meta.get("QUERY_STRING"):
        return None  # e.g. ?format=, which DRF's negotiation reads
    accept = meta.get("HTTP_ACCEPT")
    if accept is not None and not all(part.strip() in _JSON_ACCEPTS for part in accept.split(",")):
        return None
    header = meta.get("HTTP_AUTHORIZATION")
    if not header or not header.isascii():
        return None
    parts = header.split()
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return None
    api_key = api_key_check(parts[1])
    if api_key is None:
        return None  # DRF answers 401 (unknown and revoked keys alike)
    return TeamPrincipal(team=api_key.team, api_key=api_key)


def drf_exception_response(
    view: APIView, request: HttpRequest, exc: Exception, kwargs: dict[str, Any]
) -> HttpResponseBase:
    """The response DRF's ``dispatch`` gives when the view method raises ``exc``."""
    view.args, view.kwargs = (), kwargs
    drf_request = view.initialize_request(request, **kwargs)
    view.request = drf_request
    view.headers = view.default_response_headers
    view.format_kwarg = view.get_format_suffix(**kwargs)
    negotiated = view.perform_content_negotiation(drf_request)
    drf_request.accepted_renderer, drf_request.accepted_media_type = negotiated
    response = view.handle_exception(exc)
    return view.finalize_response(drf_request, response, **kwargs)


def json_response(
    view: APIView, data: Any, status: int = 200, headers: dict[str, str] | None = None
) -> HttpResponse:
    """``Response(data, status, headers)`` as DRF renders it for ``view``."""
    response = HttpResponse(_RENDERER.render(data), content_type="application/json", status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    for name, value in view.default_response_headers.items():
        response[name] = value
    return response


def job_read(
    view: APIView, request: HttpRequest, team: Team, job_id: uuid.UUID
) -> HttpResponse | None:
    """``GET /api/v1/jobs/{id}`` (``JobDetailView.get``)."""
    budget = budget_of(view.throttle_scope, team.pk)  # type: ignore[attr-defined]
    if budget is not None and ratelimit.counted_reads():  # one statement, one round trip
        count, row = ratelimit.count_request_and_read_job(budget.key, budget.window_end, job_id)
        if not spent(request, budget.verdict(count)):
            return TO_DRF
        job = selectors.job_of_team(team=team, job_id=job_id, job=row)
    else:
        if not spent(request, budget_spend(view.throttle_scope, team.pk)):  # type: ignore[attr-defined]
            return TO_DRF
        job = selectors.job_get(team=team, job_id=job_id)
    return json_response(view, job_body(job))


def job_create(view: APIView, request: HttpRequest, team: Team) -> HttpResponse | None:
    """``POST /api/v1/jobs`` (``JobListCreateView.post``) for a plainly valid body.

    On PostgreSQL with the database's budget, the request's count and the job's
    INSERT go in one round trip (``_create_in_one_trip``). Else the request is counted
    first, as DRF's throttle does, then the job written. Either way the count is a
    transaction of its own: counting in the job's transaction would hold the team's
    counter row locked until that write's commit (its WAL flush, and the standby's
    answer under synchronous replication), one create of a team at a time.
    """
    scope = view.throttle_scope  # type: ignore[attr-defined]
    spec = _plain_spec(request)
    if spec is not None and ratelimit.counted_reads():
        budget = budget_of(scope, team.pk)
        if budget is not None:
            response = _create_in_one_trip(view, request, team, budget, spec)
            if response is not _NOT_SENT:
                return response
    verdict = budget_spend(scope, team.pk)
    if not spent(request, verdict):
        return TO_DRF
    if spec is None:
        return TO_DRF  # the serializer says what is wrong
    job, created = services.job_schedule(team=team, now=verdict.now, **vars(spec))
    return _created(view, job, created)


_NOT_SENT: Any = object()


def _create_in_one_trip(
    view: APIView, request: HttpRequest, team: Team, budget: Budget, spec: JobSpec
) -> HttpResponse | None:
    """The count and a guarded INSERT (``services.job_write_one``, guarded by the budget:
    ``ratelimit.within_budget``) in one round trip, each its own transaction; the
    response, None for DRF (over budget), or ``_NOT_SENT`` where nothing was sent.

    The INSERT writes nothing where a guard did not hold: over budget (the answer is
    429 as ever), others' requests spending the rest of the budget between the two
    statements, or this process's clock and the database's choosing different buckets
    or disagreeing on the horizon's edge. An allowed request whose INSERT did not
    write is then written by ``job_schedule`` with the count's clock, as on the other
    path. A count that failed while the INSERT wrote (its guard read the counter
    without this request) is answered with the job: it exists.
    """
    guard_sql, guard_params = ratelimit.within_budget(
        budget.key, budget.window_end, budget.num_requests
    )
    write = services.job_write_one(
        team=team, spec=spec, now=timezone.now(), guard_sql=guard_sql, guard_params=guard_params
    )
    if write is None:
        return _NOT_SENT
    outcomes = prepared_pipeline(
        [ratelimit.counting(budget.key, budget.window_end), (write.sql, write.params)]
    )
    if outcomes is None:
        return _NOT_SENT
    counted, written = outcomes
    if isinstance(written, tuple):  # the job is written (and counted, unless that failed)
        if isinstance(counted, Exception):
            logger.warning("a create's count failed (%s); job %s is written", counted, write.job.id)
        else:
            spent(request, budget.verdict(counted[0], counted[1].astimezone(UTC)))
        return _created(view, services.job_written(write, written[0]), True)
    if isinstance(counted, Exception):
        raise counted
    verdict = budget.verdict(counted[0], counted[1].astimezone(UTC))
    if not spent(request, verdict):
        return TO_DRF
    if isinstance(written, Exception):
        raise written
    job, created = services.job_schedule(team=team, now=verdict.now, **vars(spec))
    return _created(view, job, created)


def _created(view: APIView, job: Job, created: bool) -> HttpResponse:
    headers = {"Location": _job_url(get_script_prefix()).replace(_ANY_ID, str(job.id))}
    if not created:
        headers[REPLAY_HEADER] = "true"
    trace_headers(headers, job.trace_context)
    return json_response(view, job_body(job), 201 if created else 200, headers)


def trace_headers(headers: dict[str, str], trace_context: str | None) -> None:
    """Add the ``traceparent`` (and ``tracestate``) of a stored context to ``headers``."""
    if trace_context:
        parent, state = tracing.context_split(trace_context)
        headers[TRACEPARENT_HEADER] = parent
        if state:
            headers[TRACESTATE_HEADER] = state


def _plain_spec(request: HttpRequest) -> JobSpec | None:
    """The create body as a JobSpec, if it is small JSON the plain validator accepts
    and its callback passes the SSRF check; else None (for DRF)."""
    data = _small_json_body(request)
    if data is None:
        return None
    request.sendlater_context = {  # type: ignore[attr-defined]  # as the view's _name_targets
        "target_fields": {0: target_field(data)} if isinstance(data, dict) else {}
    }
    valid = job_create_plain(data)
    if valid is None or not _callback_allowed(valid):
        return None
    return job_spec_from(valid, tracing.context_of_request(request.META))


_ANY_ID = "00000000-0000-0000-0000-000000000000"


@functools.cache
def _job_url(script_prefix: str) -> str:
    # reverse() walks the URL patterns each time (~5 % of a create); a job's URL is
    # this one with its id in place of the zeros (a UUID needs no quoting).
    return reverse("job-detail", kwargs={"job_id": _ANY_ID})


def _small_json_body(request: HttpRequest) -> Any | None:
    """The parsed JSON body, or None where DRF's parser must answer (or refuse) it."""
    meta = request.META
    if meta.get("CONTENT_TYPE") not in _JSON_CONTENT_TYPES:
        return None
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    memory_limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if not 0 < length <= settings.SENDLATER_MAX_REQUEST_BYTES or (
        memory_limit is not None and length > memory_limit
    ):
        return None
    try:
        return json_loads(request.body)  # DRF's parser reads the same cached bytes later
    except Exception:  # ParseError, or a body that ends early: DRF answers it
        return None


def _callback_allowed(valid: dict[str, Any]) -> bool:
    """The SSRF check ``CallbackUrlField`` makes before its pattern (the plain validator
    checks only the pattern, which an allow-listed IPv6 network widens to any IPv6 literal)."""
    url = valid.get("callback_url")
    if url is None:
        return True
    try:
        netguard.check_url(url, conf.callback_allowlist())
    except netguard.BlockedTarget:
        return False
    return True
