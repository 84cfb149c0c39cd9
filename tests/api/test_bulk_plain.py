"""The bulk endpoint's direct paths against the serializers they stand in for.

``bulk_jobs_plain`` must never accept what JobBulkCreateSerializer refuses, and
must give the same validated items when it accepts; ``bulk_result_body`` must
equal JobBulkResultSerializer's output. No database: plain data only.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.api.jobs.bodies import JobBulkResultSerializer
from scheduling.api.jobs.bulkplain import bulk_jobs_plain, bulk_result_body
from scheduling.api.jobs.serializers import MAX_BULK_JOBS, JobBulkCreateSerializer
from scheduling.models import JobStatus

VALID = {
    "due_at": "2027-03-01T09:00:00Z",
    "handler": "noop",
    "payload": {"n": 1, "tags": ["a", None, 2.5]},
    "metadata": {"booking": "42", "empty": ""},
    "idempotency_key": "k-1",
    "window_seconds": 30,
    "expires_after_seconds": None,
}


def serializer_items(body: Any) -> list[dict[str, Any]] | None:
    serializer = JobBulkCreateSerializer(data=body)
    if not serializer.is_valid():
        return None
    return [dict(item) for item in serializer.validated_data["jobs"]]


def check(body: Any) -> list[dict[str, Any]] | None:
    plain = bulk_jobs_plain(body)
    if plain is not None:
        assert plain == serializer_items(body), body
    return plain


def test_plain_bodies_take_the_direct_path() -> None:
    webhook = {"due_at": "2027-03-01T10:00:00+01:00", "callback_url": "https://example.com/h"}
    bodies = [
        {"jobs": [VALID]},
        {"jobs": [{"due_at": "2027-03-01T09:00:00.123456Z", "handler": "noop"}]},
        {"jobs": [webhook, VALID, {"due_at": "2027-03-01T09:00:00Z", "handler": "noop"}]},
        {"jobs": [{**VALID, "expires_after_seconds": 0, "window_seconds": 0, "payload": []}]},
        {"jobs": [{**VALID, "flow_control_key": "partner"}, {**VALID, "flow_control_key": None}]},
        {"jobs": [{**VALID, "payload": "text", "metadata": {}}] * MAX_BULK_JOBS},
    ]
    for body in bodies:
        assert check(body) is not None, body
    items = check({"jobs": [webhook]})
    assert items is not None
    assert items[0]["callback_url"] == "https://example.com/h"
    assert items[0]["due_at"] == datetime(2027, 3, 1, 9, tzinfo=UTC)


def test_anything_the_serializer_refuses_goes_to_the_serializer() -> None:
    refused = [
        None,
        [],
        {},
        {"jobs": []},
        {"jobs": None},
        {"jobs": [VALID], "extra": 1},
        {"jobs": [VALID] * (MAX_BULK_JOBS + 1)},
        {"jobs": [None]},
        {"jobs": ["x"]},
        {"jobs": [{**VALID, "unknown": 1}]},
        {"jobs": [{k: v for k, v in VALID.items() if k != "due_at"}]},
        {"jobs": [{k: v for k, v in VALID.items() if k != "handler"}]},
        {"jobs": [{**VALID, "callback_url": "https://example.com"}]},
        {"jobs": [{**VALID, "due_at": "2027-03-01T09:00:00"}]},
        {"jobs": [{**VALID, "due_at": "tomorrow"}]},
        {"jobs": [{**VALID, "due_at": ""}]},
        {"jobs": [{**VALID, "due_at": 1_800_000_000}]},
        {"jobs": [{**VALID, "due_at": None}]},
        {"jobs": [{**VALID, "handler": ""}]},
        {"jobs": [{**VALID, "handler": ""}]},
        {"jobs": [{**VALID, "handler": 12}]},
        {"jobs": [{**VALID, "handler": "x" * 201}]},
        {"jobs": [{**VALID, "handler": "no\x00pe"}]},
        {"jobs": [{**VALID, "handler": "\ud800"}]},
        {"jobs": [{**VALID, "idempotency_key": None}]},
        {"jobs": [{**VALID, "idempotency_key": "k" * 256}]},
        {"jobs": [{**VALID, "payload": None}]},
        {"jobs": [{**VALID, "metadata": None}]},
        {"jobs": [{**VALID, "metadata": []}]},
        {"jobs": [{**VALID, "metadata": {"": "v"}}]},
        {"jobs": [{**VALID, "metadata": {"k" * 65: "v"}}]},
        {"jobs": [{**VALID, "metadata": {"k\x00": "v"}}]},
        {"jobs": [{**VALID, "metadata": {"k": 1}}]},
        {"jobs": [{**VALID, "metadata": {"k": None}}]},
        {"jobs": [{**VALID, "metadata": {"k": "v" * 513}}]},
        {"jobs": [{**VALID, "metadata": {f"k{i}": "v" for i in range(33)}}]},
        {"jobs": [{**VALID, "window_seconds": -1}]},
        {"jobs": [{**VALID, "window_seconds": 86_401}]},
        {"jobs": [{**VALID, "window_seconds": True}]},
        {"jobs": [{**VALID, "window_seconds": 1.5}]},
        {"jobs": [{**VALID, "callback_url": " https://example.com/h "}]},
        {"jobs": [{**VALID, "window_seconds": "1"}]},
        {"jobs": [{**VALID, "window_seconds": None}]},
        {"jobs": [{**VALID, "expires_after_seconds": -1}]},
        {"jobs": [{**VALID, "expires_after_seconds": 10**12}]},
        {"jobs": [{**VALID, "flow_control_key": ""}]},
        {"jobs": [{**VALID, "flow_control_key": "k" * 101}]},
        {"jobs": [{**VALID, "flow_control_key": "a/b"}]},
        {"jobs": [{**VALID, "flow_control_key": 5}]},
        {"jobs": [VALID, {**VALID, "due_at": "nope"}]},
    ]
    for body in refused:
        assert serializer_items(body) is None, body
        assert bulk_jobs_plain(body) is None, body


_text = st.one_of(
    st.text(max_size=8),
    st.sampled_from(
        ["", " ", " noop ", "noop", "x" * 201, "a\x00b", "\ud800", "é", "a/b", "k" * 101]
    ),
)
_value = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 10**6), st.floats(allow_nan=False), _text
)
_NAMES = [
    "due_at",
    "handler",
    "callback_url",
    "payload",
    "metadata",
    "idempotency_key",
    "window_seconds",
    "expires_after_seconds",
    "flow_control_key",
    "other",
]
_field_value = st.one_of(
    _value,
    st.sampled_from(["2027-03-01T09:00:00Z", "2027-03-01T09:00:00", "2027-03-01 09:00+02"]),
    st.dictionaries(_text, st.one_of(_text, st.none(), st.integers()), max_size=3),
    st.lists(_value, max_size=2),
)


@st.composite
def _item(draw: st.DrawFn) -> dict[str, Any]:
    # A valid job with a field or two replaced or dropped: near the boundary.
    item = dict(VALID)
    item.update(draw(st.dictionaries(st.sampled_from(_NAMES), _field_value, max_size=2)))
    for name in draw(st.lists(st.sampled_from(_NAMES), max_size=1)):
        item.pop(name, None)
    return item


@settings(max_examples=400, deadline=None)
@given(st.lists(_item(), min_size=1, max_size=3))
def test_direct_path_agrees_with_the_serializer(items: list[dict[str, Any]]) -> None:
    check({"jobs": items})


def test_result_body_matches_the_serializer() -> None:
    plus_one = timezone(timedelta(hours=1))
    jobs = [
        SimpleNamespace(
            id=uuid.uuid4(),
            status=JobStatus.PENDING,
            due_at=datetime(2027, 3, 1, 9, 0, 0, 123456, tzinfo=UTC),
            bucket=datetime(2027, 3, 1, 9, tzinfo=UTC),
            shard=7,
        ),
        SimpleNamespace(
            id=uuid.uuid4(),
            status="delivered",
            due_at=datetime(2027, 3, 1, 10, tzinfo=plus_one),
            bucket=datetime(2027, 3, 1, 9, tzinfo=UTC),
            shard=0,
        ),
    ]
    results = [(jobs[0], True), (jobs[1], False)]
    expected = JobBulkResultSerializer(
        {
            "jobs": [
                {
                    "id": job.id,
                    "status": job.status,
                    "due_at": job.due_at,
                    "bucket": job.bucket,
                    "shard": job.shard,
                    "created": created,
                }
                for job, created in results
            ]
        }
    ).data
    assert bulk_result_body(results) == expected
