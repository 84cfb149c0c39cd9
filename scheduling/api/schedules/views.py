"""Recurring-schedule views: validate with a serializer, call one service or selector."""

from __future__ import annotations

from datetime import datetime

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from scheduling import tracing
from scheduling.api import pagination, schema
from scheduling.api.jobs import fastpath
from scheduling.api.jobs.views import TeamView, _name_targets
from scheduling.api.schedules.serializers import (
    DEFAULT_PREVIEW,
    OccurrencesQuerySerializer,
    OccurrencesSerializer,
    ScheduleCreateSerializer,
    SchedulePageSerializer,
    ScheduleSerializer,
    ScheduleUpdateSerializer,
    schedule_changes_from,
    schedule_spec_from,
)
from scheduling.api.schedules.serializers import ScheduleListQuerySerializer as ListQuery
from scheduling.models import Schedule
from scheduling.schedules import services as schedules
from scheduling.sharding.clock import db_now

SCHEDULE_ID = "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
SCHEDULE_ID_PARAMETER = OpenApiParameter(
    "schedule_id",
    OpenApiTypes.UUID,
    OpenApiParameter.PATH,
    description="The schedule's id, as returned when it was created.",
    examples=[OpenApiExample("A schedule id", value=SCHEDULE_ID)],
)
SCHEDULE_EXAMPLE = {
    "id": SCHEDULE_ID,
    "cron": "0 9 * * MON-FRI",
    "every_seconds": None,
    "timezone": "America/New_York",
    "callback_url": "https://example.com/hooks/standup",
    "handler": None,
    "payload": {"kind": "standup"},
    "metadata": {"team": "blue"},
    "window_seconds": 0,
    "expires_after_seconds": 3600,
    "start_at": None,
    "end_at": None,
    "missed": "skip",
    "flow_control_key": None,
    "paused": False,
    "next_occurrences": [
        "2027-03-01T14:00:00Z",
        "2027-03-02T14:00:00Z",
        "2027-03-03T14:00:00Z",
        "2027-03-04T14:00:00Z",
        "2027-03-05T14:00:00Z",
    ],
    "created_at": "2027-02-27T12:00:00Z",
    "updated_at": "2027-02-27T12:00:00Z",
}
CREATE_EXAMPLES = [
    OpenApiExample(
        "Weekdays at 09:00 New York time",
        request_only=True,
        value={
            "cron": "0 9 * * MON-FRI",
            "timezone": "America/New_York",
            "callback_url": "https://example.com/hooks/standup",
            "payload": {"kind": "standup"},
            "metadata": {"team": "blue"},
            "expires_after_seconds": 3600,
        },
    ),
    OpenApiExample(
        "Every 10 minutes, a handler, fire the last missed one",
        request_only=True,
        value={"every_seconds": 600, "handler": "noop", "missed": "fire_last"},
    ),
    OpenApiExample("Schedule", response_only=True, value=SCHEDULE_EXAMPLE),
]


def _body(schedule: Schedule, now: datetime | None = None) -> dict:
    schedule.next_occurrences = schedules.schedule_occurrences(  # type: ignore[attr-defined]
        schedule=schedule, count=schedules.NEXT_OCCURRENCES, now=now
    )
    return ScheduleSerializer(schedule).data


class ScheduleView(TeamView):
    throttle_scope = "jobs"


@extend_schema(tags=["schedules"])
class ScheduleListCreateView(ScheduleView):
    @extend_schema(
        operation_id="schedules_list",
        summary="List recurring schedules",
        description="The team's schedules, oldest first, one page at a time.",
        parameters=[ListQuery],
        responses={200: SchedulePageSerializer, **schema.errors(*schema.COMMON)},
    )
    def get(self, request: Request) -> Response:
        query = ListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        cursor, limit = pagination.page_params(query.validated_data)
        found = schedules.schedule_list(
            team=self.team, after=pagination.cursor_decode(cursor) if cursor else None
        )
        page, next_cursor = pagination.page_cut(
            found, limit, lambda s: pagination.cursor_encode(s.created_at, s.id)
        )
        now = db_now()
        return Response(pagination.page_body(request, [_body(s, now) for s in page], next_cursor))

    @extend_schema(
        operation_id="schedules_create",
        summary="Create a recurring schedule",
        description=(
            "Exactly one of `cron` (in `timezone`) or `every_seconds`, and one of "
            "`callback_url` or `handler`. Each occurrence becomes an ordinary job "
            "carrying `schedule_id` and `scheduled_for`. See docs/schedules.md."
        ),
        request=ScheduleCreateSerializer,
        responses={
            201: OpenApiResponse(ScheduleSerializer, description="Created."),
            **schema.errors(*schema.WITH_BODY),
        },
        examples=CREATE_EXAMPLES,
    )
    def post(self, request: Request) -> Response:
        _name_targets(request, [request.data])
        serializer = ScheduleCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        context = tracing.context_of_request(request.META)
        spec = schedule_spec_from(serializer.validated_data, context)
        schedule = schedules.schedule_create(team=self.team, spec=spec)
        headers = {"Location": reverse("schedule-detail", kwargs={"schedule_id": schedule.id})}
        fastpath.trace_headers(headers, schedule.trace_context)
        return Response(_body(schedule), status=status.HTTP_201_CREATED, headers=headers)


@extend_schema(tags=["schedules"], parameters=[SCHEDULE_ID_PARAMETER])
class ScheduleDetailView(ScheduleView):
    @extend_schema(
        operation_id="schedules_retrieve",
        summary="Get a recurring schedule",
        responses={200: ScheduleSerializer, **schema.errors(*schema.COMMON, 404)},
    )
    def get(self, request: Request, schedule_id: str) -> Response:
        return Response(_body(schedules.schedule_get(team=self.team, schedule_id=schedule_id)))

    @extend_schema(
        operation_id="schedules_update",
        summary="Change a recurring schedule",
        description=(
            "Re-plans the future: pending occurrences from now on are canceled and "
            "planned again under the new settings; an instant already delivered or in "
            "flight never fires twice."
        ),
        request=ScheduleUpdateSerializer,
        responses={200: ScheduleSerializer, **schema.errors(*schema.WITH_BODY, 404)},
        examples=[
            OpenApiExample("New time", request_only=True, value={"cron": "30 8 * * MON-FRI"}),
        ],
    )
    def patch(self, request: Request, schedule_id: str) -> Response:
        current = schedules.schedule_get(team=self.team, schedule_id=schedule_id)
        _name_targets(request, [request.data])
        serializer = ScheduleUpdateSerializer(data=request.data, context={"schedule": current})
        serializer.is_valid(raise_exception=True)
        schedule = schedules.schedule_update(
            team=self.team,
            schedule_id=schedule_id,
            changes=schedule_changes_from(serializer.validated_data),
        )
        return Response(_body(schedule))

    @extend_schema(
        operation_id="schedules_delete",
        summary="Delete a recurring schedule",
        description="Pending occurrences not yet in flight are canceled; delivered ones stay.",
        responses={204: None, **schema.errors(*schema.COMMON, 404)},
    )
    def delete(self, request: Request, schedule_id: str) -> Response:
        schedules.schedule_delete(team=self.team, schedule_id=schedule_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(tags=["schedules"], parameters=[SCHEDULE_ID_PARAMETER])
class SchedulePauseView(ScheduleView):
    @extend_schema(
        operation_id="schedules_pause",
        summary="Pause a recurring schedule",
        description="No more occurrences; pending ones not yet in flight are canceled.",
        request=None,
        responses={200: ScheduleSerializer, **schema.errors(*schema.COMMON, 404)},
    )
    def post(self, request: Request, schedule_id: str) -> Response:
        return Response(_body(schedules.schedule_pause(team=self.team, schedule_id=schedule_id)))


@extend_schema(tags=["schedules"], parameters=[SCHEDULE_ID_PARAMETER])
class ScheduleResumeView(ScheduleView):
    @extend_schema(
        operation_id="schedules_resume",
        summary="Resume a paused schedule",
        description="Occurrences missed while paused follow the schedule's `missed` policy.",
        request=None,
        responses={200: ScheduleSerializer, **schema.errors(*schema.COMMON, 404)},
    )
    def post(self, request: Request, schedule_id: str) -> Response:
        return Response(_body(schedules.schedule_resume(team=self.team, schedule_id=schedule_id)))


@extend_schema(tags=["schedules"], parameters=[SCHEDULE_ID_PARAMETER])
class ScheduleOccurrencesView(ScheduleView):
    @extend_schema(
        operation_id="schedules_occurrences",
        summary="Preview the next occurrences",
        description="The next `count` instants (UTC, at most 100) from now, by the rule.",
        parameters=[OccurrencesQuerySerializer],
        responses={200: OccurrencesSerializer, **schema.errors(*schema.COMMON, 404)},
    )
    def get(self, request: Request, schedule_id: str) -> Response:
        query = OccurrencesQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        schedule = schedules.schedule_get(team=self.team, schedule_id=schedule_id)
        instants = schedules.schedule_occurrences(
            schedule=schedule, count=query.validated_data.get("count", DEFAULT_PREVIEW)
        )
        return Response(OccurrencesSerializer({"occurrences": instants}).data)


# OpenAPI links from a created schedule to the operations on it (postprocessing hook).
SCHEDULE_LINKS = {
    name: {"operationId": op, "parameters": {"schedule_id": "$response.body#/id"}}
    for name, op in (
        ("GetSchedule", "schedules_retrieve"),
        ("UpdateSchedule", "schedules_update"),
        ("DeleteSchedule", "schedules_delete"),
        ("PauseSchedule", "schedules_pause"),
        ("ResumeSchedule", "schedules_resume"),
        ("ScheduleOccurrences", "schedules_occurrences"),
    )
}
_ONE_OF = {
    "allOf": [
        {"oneOf": [{"required": ["cron"]}, {"required": ["every_seconds"]}]},
        {
            "oneOf": [
                {"required": ["callback_url"]},
                {"required": ["handler"]},
                {"required": ["topic"]},
            ]
        },
    ]
}
_AT_MOST_ONE = {
    "not": {
        "anyOf": [
            {"required": ["cron", "every_seconds"]},
            {"required": ["callback_url", "handler"]},
            {"required": ["callback_url", "topic"]},
            {"required": ["handler", "topic"]},
        ]
    }
}


def document_schedules(result: dict, generator: object, **kwargs: object) -> dict:
    """Postprocessing hook: the rules drf-spectacular cannot say from the serializers
    (exactly one of cron/every_seconds and of callback_url/handler), the Location
    header, and links from a created schedule to its operations."""
    components = result.get("components", {}).get("schemas", {})
    if "ScheduleCreateRequest" in components:
        components["ScheduleCreateRequest"].update(_ONE_OF)
    if "PatchedScheduleUpdateRequest" in components:
        components["PatchedScheduleUpdateRequest"].update(_AT_MOST_ONE)
    create = result.get("paths", {}).get("/api/v1/schedules", {}).get("post")
    if create:
        created = create["responses"]["201"]
        created["links"] = SCHEDULE_LINKS
        created["headers"] = {
            "Location": {
                "description": "Path of the new schedule.",
                "required": True,
                "schema": {"type": "string"},
            }
        }
    return result
