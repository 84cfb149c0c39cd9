"""Topic jobs fanned out: one child webhook job per endpoint, in the write-back's
transaction (``polling.engine.write_group.WriteGroup.write``).

A topic job's outcome is ``delivered`` at once (``polling.dispatch.topics``).
``fanout_plan``, before the fenced write, reads the endpoints enabled now of the
group's topics (one query) and turns each such result into ``fanned_out``, or
``dead`` when its topic is gone or has no endpoint enabled (its failure callback
hears that), and draws its children's ids: the result names them
(``Result.children``), and on PostgreSQL the fenced write that marks the parent
``fanned_out`` writes them on it too (``request.children``: endpoint id -> job id; on
SQLite ``fanout_write`` names them in a second UPDATE). ``fanout_write``, after the
write, inserts the children of the parents it changed, due now in the open bucket,
like callbacks: none is lost (a crash before the commit loses the parent's write too,
and the parent is read again), none is doubled (a parent fenced out writes no child).

Each child is an ordinary webhook job: the endpoint's URL, the parent's payload,
metadata, expiry and trace context, the parent's request settings under the
endpoint's, and the endpoint's delivery key as its flow-control key (paused while
the endpoint is disabled). Its own attempts, retries, dead letter and callbacks follow.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import transaction

from polling.common.failpoints import failpoint
from polling.common.sql import dt, fetch_all, is_postgres, placeholders, to_json
from polling.common.wakeups import due_now_written
from polling.dispatch.base import ClaimedJob
from polling.writing.callbacks import extras_write
from polling.writing.writeback import Result
from scheduling import keys
from scheduling.choices import EndpointState
from scheduling.models import Job, JobStatus, Team
from scheduling.sharding.buckets import shard_counts_record
from scheduling.sharding.clock import open_bucket
from scheduling.storage.gcpause import gc_paused
from scheduling.storage.jobinsert import JobBuilder, jobs_insert, new_job_id_texts
from scheduling.topics.models import delivery_key

TOPIC_OF = "topic_of"  # a child's stored request: its parent's id
TOPIC = "topic"  # ... its topic's name
ENDPOINT = "endpoint"  # ... and its endpoint's id
CHILDREN = "children"  # a parent's stored request: endpoint id -> child job id
# The parent's request keys a child does not inherit.
_NOT_INHERITED = frozenset({"callbacks", CHILDREN})


@dataclass(frozen=True, slots=True)
class _Endpoint:
    name: str
    url: str
    request: dict[str, Any] | None
    key: str


@dataclass(slots=True)
class FanOut:
    """The group's topic parents to fan out, each with the endpoints enabled now, and
    their children (drawn in the open bucket ``place``)."""

    parents: list[tuple[ClaimedJob, Result, list[_Endpoint]]]
    walk: _Walk
    place: datetime


def fanout_plan(
    *,
    jobs: Sequence[ClaimedJob],
    results: Sequence[Result],
    now: datetime,
    held: Collection[int] = (),
) -> FanOut | None:
    """Mark the group's delivered topic jobs ``fanned_out`` (or ``dead``: no endpoint
    enabled) and name their children on them; return what ``fanout_write`` writes.
    None: no topic job to fan out (one pass). ``held``: the shards this poller reads,
    where the children are drawn (none given: their parents' shards)."""
    topic_jobs = [job for job in jobs if job.target_kind == "topic"]
    if not topic_jobs:
        return None
    by_id = {r.job_id: r for r in results}
    due = [
        (job, result)
        for job in topic_jobs
        if (result := by_id.get(job.id)) is not None and result.status == "delivered"
    ]
    if not due:
        return None
    endpoints = _endpoints_enabled({(job.team_id, job.target) for job, _ in due})
    parents = []
    for job, result in due:
        enabled = endpoints.get((job.team_id, job.target))
        if not enabled:
            result.status = JobStatus.DEAD
            result.last_error = f"topic {job.target!r} does not exist or has no endpoint enabled"
            continue
        result.status = JobStatus.FANNED_OUT
        parents.append((job, result, enabled))
    if not parents:
        return None
    place = open_bucket(now)
    count = shard_counts_record([place])[place]
    return FanOut(parents, _children_walk(parents, count, held), place)


def fanout_write(plan: FanOut | None, *, written: Collection[UUID], now: datetime) -> int:
    """Insert the children of the planned parents the fenced write changed (on SQLite
    also name them on their parents); return the children written. Call in the
    write-back's transaction, after it."""
    if plan is None:
        return 0
    parents, walk = plan.parents, plan.walk
    if any(job.id not in written for job, _, _ in parents):  # fenced out: no child of those
        walk = walk.of({n for n, (job, _, _) in enumerate(parents) if job.id in written})
        if not walk.children:
            return 0
    if is_postgres():  # the write-back named them on their parents
        written_count = _children_insert(parents, walk, plan.place, now)
    else:
        with gc_paused():  # ten thousand short-lived rows a group, none in a cycle
            children = _children_build(parents, walk, plan.place, now)
            jobs_insert(children)
        written_count = len(children)
        extras_write(walk.named)
    due_now_written(walk.shards)  # their shards' owners read them at once
    # Fault tests: die with the children committed, none delivered yet.
    transaction.on_commit(lambda: failpoint("fanout_committed"))
    return written_count


@dataclass(slots=True)
class _Walk:
    """A group's children, walked once for both ways of writing them.

    ``shared``: each distinct request the children of an endpoint share (the parent's
    settings under the endpoint's, its topic and endpoint: ``_shared_request``), with
    its endpoint and its JSON text. ``children``: per child its parent's index in the
    group, its id's text, its shard and its shared request's index. ``shards``:
    where they fall. ``named``: per parent, its ``request`` naming its children (for
    ``extras_write``, SQLite's).
    """

    shared: list[tuple[_Endpoint, dict[str, Any], str]]
    children: list[tuple[int, str, int, int]]
    shards: set[int]
    named: list[tuple[Result, dict[str, Any], None]]

    def of(self, parents: set[int]) -> _Walk:
        """The walk of the parents numbered ``parents`` only (the others fenced out)."""
        children = [child for child in self.children if child[0] in parents]
        named = [n for number, n in enumerate(self.named) if number in parents]
        return _Walk(self.shared, children, {child[2] for child in children}, named)


def _children_walk(
    parents: list[tuple[ClaimedJob, Result, list[_Endpoint]]], count: int, held: Collection[int]
) -> _Walk:
    """The children of ``parents``, one per endpoint, with ids drawn on ``held`` (none
    given: the parents' shards), each named on its parent's result."""
    n = sum(len(eps) for _, _, eps in parents)
    ids = iter(_ids_on_shards(n, count, set(held) or {job.shard for job, _, _ in parents}))
    shared_at: dict[tuple[str, int, str, str], int] = {}  # _shared_request's key -> index
    walk = _Walk([], [], set(), [])
    for number, (job, result, endpoints) in enumerate(parents):
        inherited = {k: v for k, v in (job.request or {}).items() if k not in _NOT_INHERITED}
        inherited_json = json.dumps(inherited, sort_keys=True) if inherited else ""
        mine: dict[str, str] = {}
        for endpoint in endpoints:
            text, shard = next(ids)
            mine[endpoint.name] = text
            walk.shards.add(shard)
            key = (inherited_json, job.team_id, job.target, endpoint.name)
            at = shared_at.get(key)
            if at is None:
                at = shared_at[key] = len(walk.shared)
                walk.shared.append(_shared_request(inherited, job.target, endpoint))
            walk.children.append((number, text, shard, at))
        result.children = mine
        walk.named.append((result, {**(job.request or {}), CHILDREN: mine}, None))
    return walk


# PostgreSQL builds the children's rows itself: the parents and the endpoints' shared
# requests travel once each (JSON), the children as four arrays in text (ids, shards,
# and which parent and which shared request); each child's payload, metadata and
# request are the parent's jsonb values, never parsed again per child. The columns
# and values are those of ``_children_build`` (tests/integration/test_fanout_rows.py).
_CHILDREN_INSERT_SQL = """
INSERT INTO scheduling_job (id, team_id, due_at, bucket, shard, status, target_kind, target,
    payload, metadata, idempotency_key, request_fingerprint, window_seconds, expires_at,
    attempts, last_error, created_at, updated_at, schedule_id, scheduled_for,
    flow_control_key, request, trace_context)
SELECT c.id, (p.v->>1)::int8, %s, %s, c.shard, 'pending', 'webhook', e.v->>0,
    p.v->2, p.v->3, NULL, '', 0, (p.v->>4)::timestamptz,
    0, '', %s, %s, NULL, NULL,
    e.v->>1, (e.v->2) || jsonb_build_object('topic_of', p.v->>0), p.v->>5
FROM unnest(%s::text::uuid[], %s::text::int4[], %s::text::int4[], %s::text::int4[])
    AS c(id, shard, parent, shared)
JOIN jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS p(v, n) ON p.n = c.parent
JOIN jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(v, n) ON e.n = c.shared
"""


def _children_insert(
    parents: list[tuple[ClaimedJob, Result, list[_Endpoint]]],
    walk: _Walk,
    place: datetime,
    now: datetime,
) -> int:
    """Insert ``walk``'s children in one statement (PostgreSQL): the rows
    ``_children_build`` and ``jobs_insert`` write. Returns the children written."""
    parent_rows = [
        json.dumps(
            [
                str(job.id),
                job.team_id,
                job.payload,
                job.metadata,
                None if job.expires_at is None else job.expires_at.isoformat(),
                job.trace_context,
            ],
            separators=(",", ":"),
        )
        for job, _, _ in parents
    ]
    shared_rows = [
        f"{json.dumps([endpoint.url, endpoint.key], separators=(',', ':'))[:-1]},{text}]"
        for endpoint, _, text in walk.shared
    ]
    fetch_all(
        _CHILDREN_INSERT_SQL,
        [
            dt(now),
            dt(place),
            dt(now),
            dt(now),
            "{" + ",".join(child[1] for child in walk.children) + "}",
            "{" + ",".join(str(child[2]) for child in walk.children) + "}",
            # WITH ORDINALITY counts from 1
            "{" + ",".join(str(child[0] + 1) for child in walk.children) + "}",
            "{" + ",".join(str(child[3] + 1) for child in walk.children) + "}",
            "[" + ",".join(parent_rows) + "]",
            "[" + ",".join(shared_rows) + "]",
        ],
    )
    return len(walk.children)


def _children_build(
    parents: list[tuple[ClaimedJob, Result, list[_Endpoint]]],
    walk: _Walk,
    place: datetime,
    now: datetime,
) -> list[Job]:
    """``walk``'s children as the rows ``jobs_insert`` writes on SQLite (PostgreSQL
    builds the same rows itself, ``_children_insert``)."""
    builders: dict[int, JobBuilder] = {}
    # Per parent, once for its children: its id, payload text and ``topic_of`` tail.
    texts: dict[int, tuple[str, str, str]] = {}
    children = []
    for number, text, shard, at in walk.children:
        job = parents[number][0]
        endpoint, shared, shared_json = walk.shared[at]
        builder = builders.get(job.team_id)
        if builder is None:
            builder = builders[job.team_id] = JobBuilder(
                team=Team(pk=job.team_id),
                status=JobStatus.PENDING,
                created_at=now,
                updated_at=now,
                idempotency_key=None,
                request_fingerprint="",
            )
        found = texts.get(number)
        if found is None:
            parent_id = str(job.id)
            found = texts[number] = (
                parent_id,
                json.dumps(job.payload, separators=(",", ":")),
                f',"{TOPIC_OF}":{json.dumps(parent_id)}}}',
            )
        parent_id, payload_json, topic_of = found
        children.append(
            builder.build(
                {
                    "id": UUID(text),
                    "due_at": now,
                    "bucket": place,
                    "shard": shard,
                    "target_kind": "webhook",
                    "target": endpoint.url,
                    "payload": job.payload,
                    "_payload_json": payload_json,
                    "metadata": job.metadata,
                    "expires_at": job.expires_at,
                    "flow_control_key": endpoint.key,
                    "request": {**shared, TOPIC_OF: parent_id},
                    # the endpoint's text, this parent's id
                    "_request_json": shared_json[:-1] + topic_of,
                    "trace_context": job.trace_context,
                }
            )
        )
    return children


# Draw a child's id among at most this many times the ids it needs: past that (a poller
# holding few of the open bucket's shards) the children go to any shard.
_DRAWS_PER_ID = 4
# Ids drawn beyond the expected need each round: the last few children of a group are
# not left to a round of one or two draws, which all miss the wanted shards often
# enough to notice (then those children went to any shard).
_DRAWS_AT_LEAST = 32


def _ids_on_shards(n: int, count: int, shards: set[int]) -> list[tuple[str, int]]:
    """``n`` new job ids (their text), each with its shard among ``count``, drawn so that
    each shard is one of ``shards`` (the poller's own: it holds their leases).

    A child is due at once, so whoever owns its shard reads it, woken by its commit:
    drawn on the parents' shards, the poller that fanned it out reads and sends it, and
    the other pollers are neither woken nor given small reads (with 2 pollers, half of
    the children would otherwise go to the other one). The id is still a random
    version-4 UUID and its shard still ``keys.shard_of`` of it (docs/delivery.md);
    about ``count / len(shards)`` draws an id.
    """
    wanted = {shard for shard in shards if shard < count}
    out: list[tuple[str, int]] = []
    if wanted and len(wanted) < count and count <= _DRAWS_PER_ID * len(wanted):
        budget = _DRAWS_PER_ID * (-(-n * count // len(wanted)) + _DRAWS_AT_LEAST)  # in all
        while len(out) < n and budget > 0:
            need = n - len(out)
            draws = min(budget, -(-need * count // len(wanted)) + _DRAWS_AT_LEAST)
            budget -= draws
            texts = new_job_id_texts(draws)
            out += [
                (text, shard)
                for text, shard in zip(texts, keys.shards_of(texts, count), strict=True)
                if shard in wanted
            ]
        del out[n:]
    if len(out) < n:  # every shard is wanted, or the draws came short: any shard
        texts = new_job_id_texts(n - len(out))
        out += zip(texts, keys.shards_of(texts, count), strict=True)
    return out


def _shared_request(
    inherited: dict[str, Any], topic: str, endpoint: _Endpoint
) -> tuple[_Endpoint, dict[str, Any], str]:
    """What every child of ``endpoint`` sends whose parent's request is ``inherited``
    (the parent's settings under the endpoint's, its topic and endpoint: all but the
    parent's id), with the endpoint and its JSON text."""
    shared = {**inherited, **(endpoint.request or {}), TOPIC: topic, ENDPOINT: endpoint.name}
    shared.pop(TOPIC_OF, None)  # the child's own parent, spliced in after
    return endpoint, shared, json.dumps(shared, separators=(",", ":"))


# The enabled endpoints of a group's topics, by topic and name: one statement (through
# the ORM the same query cost 1.2 ms a group against 0.36, bench/fanout.py).
_ENDPOINTS_SQL = """
SELECT t.team_id, t.name, e.name, e.url, e.request, e.flow_control_key
FROM scheduling_topicendpoint e JOIN scheduling_topic t ON t.id = e.topic_id
WHERE t.team_id IN ({teams}) AND t.name IN ({names}) AND e.state = %s
ORDER BY e.topic_id, e.name"""


def _endpoints_enabled(topics: set[tuple[int, str]]) -> dict[tuple[int, str], list[_Endpoint]]:
    """The enabled endpoints of ``topics`` ((team id, name)), by topic: one query."""
    teams = sorted({team for team, _ in topics})
    names = sorted({name for _, name in topics})
    sql = _ENDPOINTS_SQL.format(teams=placeholders(len(teams)), names=placeholders(len(names)))
    out: dict[tuple[int, str], list[_Endpoint]] = {}
    for team_id, topic, name, url, request, own_key in fetch_all(
        sql, [*teams, *names, EndpointState.ENABLED]
    ):
        if (team_id, topic) in topics:
            endpoint = _Endpoint(name, url, to_json(request), delivery_key(topic, name, own_key))
            out.setdefault((team_id, topic), []).append(endpoint)
    return out
