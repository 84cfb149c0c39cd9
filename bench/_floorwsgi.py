"""Benchmark-only WSGI application: the service, plus ``POST /bench/floor``.

``bench/api_single.py`` runs gunicorn with this module instead of
``sendlater_site.wsgi``. Every other URL goes to the service's own application
(the front door, then Django). ``/bench/floor`` is the create's database work
behind the bare stack: gunicorn reads the request and its body, and the request's
count and a job's guarded INSERT go to PostgreSQL in one round trip, as the
single-job create sends them (``scheduling.api.jobs.fastpath._create_in_one_trip``). The
statements, tables and indexes are the create's. There is no key check, no body
parsing or validation, no Job built and no JSON rendered. The answer is a constant.

So ``create / floor`` in the same run is how much of the create's rate its own
Python costs, on top of the database round trip that any create must make.

Importing this module sets nothing up (the benchmark's own process imports
``FLOOR_PATH``); Django is set up by the first call, in gunicorn's worker. The
floor counts in the database, so it has no meaning with ``--throttle-store cache``.

The INSERT is made once per worker from the request's body (``job_write_one``). Each
call then sends it again with a new job id and the budget's current window. (Two
threads of a worker may both make it on their first call; either one will do.)
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

FLOOR_PATH = "/bench/floor"
_ANSWER = b'{"floor":true}'


def application(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    service = _service()
    if environ.get("PATH_INFO") != FLOOR_PATH or environ["REQUEST_METHOD"] != "POST":
        return service(environ, start_response)
    from scheduling.storage.prepared import prepared_pipeline

    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    outcomes = prepared_pipeline(_statements(body))
    if outcomes is None or not isinstance(outcomes[1], tuple):
        start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
        return [f"the floor's INSERT did not write: {outcomes!r}".encode()]
    start_response(
        "201 Created",
        [("Content-Type", "application/json"), ("Content-Length", str(len(_ANSWER)))],
    )
    return [_ANSWER]


@functools.cache
def _service() -> Any:
    """The service's WSGI application; importing it sets Django up."""
    from sendlater_site.wsgi import application as service

    return service


def _statements(body: bytes) -> list[tuple[str, list[object]]]:
    """The count and the INSERT, the latter with a new job id, both in the budget's
    current window (as a create's: the guard reads the count of that window)."""
    from scheduling.api.access import ratelimit
    from scheduling.api.access.throttling import budget_of
    from scheduling.storage.jobinsert import new_job_ids

    team_pk, sql, template, id_at = _insert(body)
    budget = budget_of("jobs", team_pk)
    if budget is None:
        raise RuntimeError("the floor needs the jobs budget (SENDLATER_THROTTLE_JOBS)")
    _, guard = ratelimit.within_budget(budget.key, budget.window_end, budget.num_requests)
    params = list(template)
    params[id_at] = new_job_ids(1)[0]
    params[-len(guard) :] = guard
    return [ratelimit.counting(budget.key, budget.window_end), (sql, params)]


@functools.cache
def _insert(body: bytes) -> tuple[object, str, tuple[object, ...], int]:
    """The INSERT of a job of ``body`` for the last team (the benchmark's): the team,
    the statement, its parameters and where the job id sits among them."""
    from django.utils import timezone

    from scheduling.api.access import ratelimit
    from scheduling.api.jobs.bulkplain import job_create_plain
    from scheduling.api.jobs.serializers import job_spec_from
    from scheduling.jobs import services
    from scheduling.models import Team

    team = Team.objects.order_by("pk").last()
    valid = job_create_plain(json.loads(body))
    if team is None or valid is None:
        raise RuntimeError("the floor needs a team and a plain create body")
    spec = job_spec_from(valid)
    guard_sql, guard_params = ratelimit.within_budget("", 0, 0)
    for _ in range(2):
        write = services.job_write_one(
            team=team, spec=spec, now=timezone.now(), guard_sql=guard_sql, guard_params=guard_params
        )
        if write is not None:
            break
        # A process learns a bucket's shard count from its first write there.
        services.job_schedule(team=team, now=None, **vars(spec))
    if write is None:
        raise RuntimeError("the floor's INSERT could not be made")
    (id_at,) = [i for i, value in enumerate(write.params) if str(value) == str(write.job.id)]
    return team.pk, write.sql, tuple(write.params), id_at
