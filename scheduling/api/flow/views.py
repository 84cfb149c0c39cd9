"""Flow-control views: a team's key limits, their live state, pause and resume.

Validate with a serializer, call one service or selector (``scheduling.flow``),
serialize a ``FlowState``. Keys are the team's own: another team's key of the same
name is another row, and unknown here.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from scheduling.api import contract, pagination, schema
from scheduling.api.errors import ErrorSerializer
from scheduling.api.flow.serializers import (
    FlowControlKeySerializer,
    FlowControlLimitsSerializer,
    FlowControlListQuerySerializer,
    FlowControlPageSerializer,
    FlowControlSerializer,
)
from scheduling.api.jobs.views import TeamView
from scheduling.errors import FlowControlNotFound
from scheduling.flow import selectors, services
from scheduling.flow.models import FlowControl
from scheduling.flow.services import KEY_MAX_CHARS

FLOW_KEY = "partner-api"
FLOW_KEY_PARAMETER = OpenApiParameter(
    "key",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="The flow-control key, as jobs name it in `flow_control_key` (URL-encoded).",
    examples=[OpenApiExample("A key", value=FLOW_KEY)],
)
FLOW_EXAMPLE = {
    "key": FLOW_KEY,
    "rate": 100,
    "period_seconds": 1,
    "parallelism": 10,
    "paused": False,
    "waiting": 1250,
    "in_flight": 10,
    "delivered_in_period": 64,
    "created_at": "2027-02-27T12:00:00Z",
    "updated_at": "2027-02-27T12:00:00Z",
}
_NOT_FOUND_MESSAGE = f"no flow control for key {FLOW_KEY!r}"
_NOT_FOUND = {
    404: OpenApiResponse(
        ErrorSerializer,
        description="No flow control of this key for this team (another team's key of "
        "the same name answers 404 too).",
        examples=[
            OpenApiExample(
                "Not found",
                value={"error": {"code": "not_found", "message": _NOT_FOUND_MESSAGE}},
            )
        ],
    )
}


def _key(key: str) -> str:
    serializer = FlowControlKeySerializer(data={"key": key})
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data["key"]


def _body(flow: FlowControl) -> dict[str, Any]:
    return FlowControlSerializer(selectors.flow_states([flow])[0]).data


class FlowControlView(TeamView):
    throttle_scope = "jobs"


@extend_schema(tags=["flow-controls"])
class FlowControlListView(FlowControlView):
    @extend_schema(
        operation_id="flow_controls_list",
        summary="List flow-control keys",
        description="The team's keys with limits or paused, by key, one page at a time.",
        parameters=[FlowControlListQuerySerializer],
        responses={200: FlowControlPageSerializer, **schema.errors(*schema.COMMON)},
    )
    def get(self, request: Request) -> Response:
        query = FlowControlListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        cursor, limit = pagination.page_params(query.validated_data)
        flows = selectors.flow_list(
            team_id=self.team.pk,
            after=pagination.key_cursor_decode(cursor) if cursor else None,
            limit=limit + 1,
        )
        flows, next_cursor = pagination.page_cut(
            flows, limit, lambda flow: pagination.key_cursor_encode(flow.key)
        )
        results = FlowControlSerializer(selectors.flow_states(flows), many=True).data
        return Response(pagination.page_body(request, results, next_cursor))


@extend_schema(tags=["flow-controls"], parameters=[FLOW_KEY_PARAMETER])
class FlowControlDetailView(FlowControlView):
    @extend_schema(
        operation_id="flow_controls_retrieve",
        summary="Get a key's limits and live state",
        responses={200: FlowControlSerializer, **schema.errors(*schema.COMMON), **_NOT_FOUND},
    )
    def get(self, request: Request, key: str) -> Response:
        flow = selectors.flow_get(team_id=self.team.pk, key=_key(key))
        if flow is None:
            raise FlowControlNotFound(f"no flow control for key {key!r}")
        return Response(_body(flow))

    @extend_schema(
        operation_id="flow_controls_set",
        summary="Set a key's limits",
        description=(
            "`rate` deliveries per `period_seconds` (default 1) and/or `parallelism` "
            "deliveries in flight at once, for the whole service. A PUT replaces the "
            "limits: what it does not give is no longer limited. The pause state is kept."
        ),
        request=FlowControlLimitsSerializer,
        responses={
            201: OpenApiResponse(FlowControlSerializer, description="Created."),
            200: OpenApiResponse(FlowControlSerializer, description="Replaced."),
            **schema.errors(*schema.WITH_BODY),
        },
        examples=[
            OpenApiExample(
                "100 a second, 10 at once",
                request_only=True,
                value={"rate": 100, "period_seconds": 1, "parallelism": 10},
            ),
            OpenApiExample("Flow control", response_only=True, value=FLOW_EXAMPLE),
        ],
    )
    def put(self, request: Request, key: str) -> Response:
        key = _key(key)
        limits = FlowControlLimitsSerializer(data=request.data)
        limits.is_valid(raise_exception=True)
        flow, created = services.flow_limits_set(team=self.team, key=key, **limits.validated_data)
        headers = {}
        if created:
            headers["Location"] = reverse("flow-control-detail", kwargs={"key": key})
        return Response(
            _body(flow),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
            headers=headers,
        )

    @extend_schema(
        operation_id="flow_controls_delete",
        summary="Remove a key's limits",
        description="The key's jobs go out as unlimited traffic (and no longer paused).",
        responses={204: None, **schema.errors(*schema.COMMON), **_NOT_FOUND},
    )
    def delete(self, request: Request, key: str) -> Response:
        services.flow_limits_delete(team=self.team, key=_key(key))
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(tags=["flow-controls"], parameters=[FLOW_KEY_PARAMETER])
class FlowControlPauseView(FlowControlView):
    @extend_schema(
        operation_id="flow_controls_pause",
        summary="Pause a key",
        description=(
            "The key's jobs stay pending (their expiry still applies) until it is "
            "resumed. A key without limits is recorded, paused."
        ),
        request=None,
        responses={200: FlowControlSerializer, **schema.errors(*schema.COMMON)},
    )
    def post(self, request: Request, key: str) -> Response:
        flow = services.flow_pause_set(team=self.team, key=_key(key), paused=True)
        return Response(_body(flow))


@extend_schema(tags=["flow-controls"], parameters=[FLOW_KEY_PARAMETER])
class FlowControlResumeView(FlowControlView):
    @extend_schema(
        operation_id="flow_controls_resume",
        summary="Resume a paused key",
        description="Its waiting jobs start in due order, within the key's limits.",
        request=None,
        responses={200: FlowControlSerializer, **schema.errors(*schema.COMMON), **_NOT_FOUND},
    )
    def post(self, request: Request, key: str) -> Response:
        flow = services.flow_pause_set(team=self.team, key=_key(key), paused=False)
        return Response(_body(flow))


# OpenAPI links from a set key to the operations on it (postprocessing hook).
FLOW_LINKS = {
    name: {"operationId": op, "parameters": {"key": "$response.body#/key"}}
    for name, op in (
        ("GetFlowControl", "flow_controls_retrieve"),
        ("DeleteFlowControl", "flow_controls_delete"),
        ("PauseFlowControl", "flow_controls_pause"),
        ("ResumeFlowControl", "flow_controls_resume"),
    )
}
_LIMIT_GIVEN = {"anyOf": [{"required": ["rate"]}, {"required": ["parallelism"]}]}


def document_flow_controls(result: dict, generator: object, **kwargs: object) -> dict:
    """Postprocessing hook: rate and/or parallelism, the key's pattern in the path,
    the Location header of a new key, and links from a set key to its operations."""
    components = result.get("components", {}).get("schemas", {})
    if "FlowControlLimitsRequest" in components:
        components["FlowControlLimitsRequest"].update(_LIMIT_GIVEN)
    for path, item in result.get("paths", {}).items():
        if not path.startswith("/api/v1/flow-controls/{key}"):
            continue
        for operation in item.values():
            for param in operation.get("parameters", []):
                if param.get("in") == "path" and param["name"] == "key":
                    param["schema"] = {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": KEY_MAX_CHARS,
                        "pattern": contract.FLOW_CONTROL_KEY,
                    }
    put = result.get("paths", {}).get("/api/v1/flow-controls/{key}", {}).get("put")
    if put:
        for code in ("200", "201"):
            put["responses"][code]["links"] = FLOW_LINKS
        put["responses"]["201"]["headers"] = {
            "Location": {
                "description": "Path of the new key's flow control.",
                "required": True,
                "schema": {"type": "string"},
            }
        }
    return result
