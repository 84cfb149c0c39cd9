"""Topic views: a team's topics and their endpoints (docs/api.md, "Topics").

Validate with a serializer, call one service or selector (``scheduling.topics``),
answer the topic or the endpoint. Topics are the team's own: another team's topic of
the same name is another row, and unknown here.
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
from scheduling.api.flow.serializers import FlowControlListQuerySerializer
from scheduling.api.jobs.views import TeamView
from scheduling.api.topics.serializers import (
    EndpointDisableSerializer,
    EndpointPatchSerializer,
    EndpointSerializer,
    EndpointSetSerializer,
    TopicNameSerializer,
    TopicPageSerializer,
    TopicPutSerializer,
    TopicSerializer,
    endpoint_body,
    endpoint_spec_from,
    topic_body,
)
from scheduling.errors import TopicNotFound
from scheduling.topics import selectors, services
from scheduling.topics.models import NAME_MAX_CHARS

TOPIC = "order-paid"
ENDPOINT = "billing"
_NAME_EXAMPLES = {"name": TOPIC, "endpoint": ENDPOINT}
NAME_PARAMETERS = {
    name: OpenApiParameter(
        name,
        OpenApiTypes.STR,
        OpenApiParameter.PATH,
        description=text,
        examples=[OpenApiExample(text, value=_NAME_EXAMPLES[name])],
    )
    for name, text in (("name", "The topic's name."), ("endpoint", "The endpoint's id."))
}
ENDPOINT_EXAMPLE = {
    "url": "https://billing.example.com/hooks/order-paid",
    "headers": {"Authorization": "Bearer s3cret"},
}
_NOT_FOUND = {
    404: OpenApiResponse(
        ErrorSerializer,
        description="No such topic (or endpoint) for this team.",
        examples=[
            OpenApiExample(
                "Not found",
                value={"error": {"code": "not_found", "message": f"no topic {TOPIC!r}"}},
            )
        ],
    )
}


def _names(name: str, endpoint: str | None = None) -> tuple[str, str]:
    data = {"name": name} if endpoint is None else {"name": name, "endpoint": endpoint}
    serializer = TopicNameSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data["name"], serializer.validated_data.get("endpoint", "")


class TopicView(TeamView):
    throttle_scope = "jobs"


@extend_schema(tags=["topics"])
class TopicListView(TopicView):
    @extend_schema(
        operation_id="topics_list",
        summary="List topics",
        description="The team's topics by name, with their endpoints, one page at a time.",
        parameters=[FlowControlListQuerySerializer],
        responses={200: TopicPageSerializer, **schema.errors(*schema.COMMON)},
    )
    def get(self, request: Request) -> Response:
        query = FlowControlListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        cursor, limit = pagination.page_params(query.validated_data)
        topics = selectors.topic_list(
            team_id=self.team.pk,
            after=pagination.key_cursor_decode(cursor) if cursor else None,
            limit=limit + 1,
        )
        topics, next_cursor = pagination.page_cut(
            topics, limit, lambda topic: pagination.key_cursor_encode(topic.name)
        )
        results = [topic_body(t, list(t.endpoints.all())) for t in topics]
        return Response(pagination.page_body(request, results, next_cursor))


@extend_schema(tags=["topics"], parameters=[NAME_PARAMETERS["name"]])
class TopicDetailView(TopicView):
    @extend_schema(
        operation_id="topics_retrieve",
        summary="Get a topic",
        responses={200: TopicSerializer, **schema.errors(*schema.COMMON), **_NOT_FOUND},
    )
    def get(self, request: Request, name: str) -> Response:
        topic = services.topic_get(team=self.team, name=_names(name)[0])
        return Response(topic_body(topic))

    @extend_schema(
        operation_id="topics_set",
        summary="Create or replace a topic",
        description=(
            "The topic's endpoints, by id (up to 100). A PUT replaces them: endpoints "
            "it leaves out are removed. Jobs naming the topic go, at their due time, to "
            "each endpoint enabled then."
        ),
        request=TopicPutSerializer,
        responses={
            201: OpenApiResponse(TopicSerializer, description="Created."),
            200: OpenApiResponse(TopicSerializer, description="Replaced."),
            **schema.errors(*schema.WITH_BODY),
        },
        examples=[
            OpenApiExample(
                "Two endpoints",
                request_only=True,
                value={
                    "endpoints": {
                        ENDPOINT: ENDPOINT_EXAMPLE,
                        "crm": {"url": "https://crm.example.com/hooks", "format": "payload"},
                    }
                },
            )
        ],
    )
    def put(self, request: Request, name: str) -> Response:
        name = _names(name)[0]
        body = TopicPutSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        specs = [endpoint_spec_from(n, d) for n, d in body.validated_data["endpoints"].items()]
        topic, created = services.topic_put(team=self.team, name=name, endpoints=specs)
        headers = {}
        if created:
            headers["Location"] = reverse("topic-detail", kwargs={"name": name})
        return Response(
            topic_body(topic),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
            headers=headers,
        )

    @extend_schema(
        operation_id="topics_delete",
        summary="Delete a topic",
        description="Deliveries made go on; jobs naming it that fall due later end dead.",
        responses={204: None, **schema.errors(*schema.COMMON), **_NOT_FOUND},
    )
    def delete(self, request: Request, name: str) -> Response:
        services.topic_delete(team=self.team, name=_names(name)[0])
        return Response(status=status.HTTP_204_NO_CONTENT)


_ENDPOINT_PARAMETERS = [NAME_PARAMETERS["name"], NAME_PARAMETERS["endpoint"]]


def _endpoint(team: Any, name: str, endpoint: str) -> Any:
    topic = services.topic_get(team=team, name=name)
    row = topic.endpoints.filter(name=endpoint).first()
    if row is None:
        raise TopicNotFound(f"no endpoint {endpoint!r} in topic {name!r}")
    return row


@extend_schema(tags=["topics"], parameters=_ENDPOINT_PARAMETERS)
class TopicEndpointView(TopicView):
    @extend_schema(
        operation_id="topics_endpoint_retrieve",
        summary="Get an endpoint",
        responses={200: EndpointSerializer, **schema.errors(*schema.COMMON), **_NOT_FOUND},
    )
    def get(self, request: Request, name: str, endpoint: str) -> Response:
        name, endpoint = _names(name, endpoint)
        return Response(endpoint_body(name, _endpoint(self.team, name, endpoint)))

    @extend_schema(
        operation_id="topics_endpoint_set",
        summary="Add or replace an endpoint",
        description="The rest of the topic stays as it is.",
        request=EndpointSetSerializer,
        responses={
            201: OpenApiResponse(EndpointSerializer, description="Added."),
            200: OpenApiResponse(EndpointSerializer, description="Replaced."),
            **schema.errors(*schema.WITH_BODY),
            **_NOT_FOUND,
        },
        examples=[OpenApiExample("An endpoint", request_only=True, value=ENDPOINT_EXAMPLE)],
    )
    def put(self, request: Request, name: str, endpoint: str) -> Response:
        name, endpoint = _names(name, endpoint)
        body = EndpointSetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        spec = endpoint_spec_from(endpoint, body.validated_data)
        row, created = services.endpoint_put(team=self.team, topic=name, spec=spec)
        return Response(
            endpoint_body(name, row),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema(
        operation_id="topics_endpoint_update",
        summary="Change an endpoint",
        description="Only the fields given change; the others, header values included, "
        "are kept (a `headers` given replaces the whole set).",
        request=EndpointPatchSerializer,
        responses={
            200: EndpointSerializer,
            **schema.errors(*schema.WITH_BODY),
            **_NOT_FOUND,
        },
        examples=[
            OpenApiExample(
                "A new URL", request_only=True, value={"url": "https://billing.example.com/v2"}
            )
        ],
    )
    def patch(self, request: Request, name: str, endpoint: str) -> Response:
        name, endpoint = _names(name, endpoint)
        body = EndpointPatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = services.endpoint_patch(
            team=self.team, topic=name, name=endpoint, changes=body.validated_data
        )
        return Response(endpoint_body(name, row))

    @extend_schema(
        operation_id="topics_endpoint_delete",
        summary="Remove an endpoint",
        description="Later fan-outs leave it out; its deliveries made go on.",
        responses={204: None, **schema.errors(*schema.COMMON), **_NOT_FOUND},
    )
    def delete(self, request: Request, name: str, endpoint: str) -> Response:
        name, endpoint = _names(name, endpoint)
        services.endpoint_delete(team=self.team, topic=name, name=endpoint)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(tags=["topics"], parameters=_ENDPOINT_PARAMETERS)
class TopicEndpointDisableView(TopicView):
    @extend_schema(
        operation_id="topics_endpoint_disable",
        summary="Disable an endpoint",
        description=(
            "Its waiting deliveries stay pending (expiry applies) until it is enabled; "
            "jobs falling due meanwhile leave it out."
        ),
        request=EndpointDisableSerializer,
        responses={200: EndpointSerializer, **schema.errors(*schema.COMMON), **_NOT_FOUND},
    )
    def post(self, request: Request, name: str, endpoint: str) -> Response:
        name, endpoint = _names(name, endpoint)
        body = EndpointDisableSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = services.endpoint_state_set(
            team=self.team,
            topic=name,
            name=endpoint,
            enabled=False,
            reason=body.validated_data.get("reason", ""),
        )
        return Response(endpoint_body(name, row))


@extend_schema(tags=["topics"], parameters=_ENDPOINT_PARAMETERS)
class TopicEndpointEnableView(TopicView):
    @extend_schema(
        operation_id="topics_endpoint_enable",
        summary="Enable an endpoint",
        description="Its waiting deliveries start in due order, within its key's limits.",
        request=None,
        responses={200: EndpointSerializer, **schema.errors(*schema.COMMON), **_NOT_FOUND},
    )
    def post(self, request: Request, name: str, endpoint: str) -> Response:
        name, endpoint = _names(name, endpoint)
        row = services.endpoint_state_set(team=self.team, topic=name, name=endpoint, enabled=True)
        return Response(endpoint_body(name, row))


_TOPIC_LINKS = {
    link: {"operationId": op, "parameters": {"name": "$response.body#/name"}}
    for link, op in (("GetTopic", "topics_retrieve"), ("DeleteTopic", "topics_delete"))
}
_NAME_RULE = {
    "type": "string",
    "minLength": 1,
    "maxLength": NAME_MAX_CHARS,
    "pattern": contract.TOPIC_NAME,
}


def document_topics(result: dict, generator: object, **kwargs: object) -> dict:
    """Postprocessing hook: the names' pattern in the paths, endpoint ids as the PUT's
    property names, the Location of a new topic, links from a set topic."""
    schemas = result.get("components", {}).get("schemas", {})
    put = schemas.get("TopicPutRequest")
    if put:
        put["properties"]["endpoints"].update(
            propertyNames=_NAME_RULE, maxProperties=services.MAX_ENDPOINTS
        )
    for path, item in result.get("paths", {}).items():
        if not path.startswith("/api/v1/topics/{name}"):
            continue
        for operation in item.values():
            for param in operation.get("parameters", []):
                if param.get("in") == "path" and param["name"] in ("name", "endpoint"):
                    param["schema"] = dict(_NAME_RULE)
    detail = result.get("paths", {}).get("/api/v1/topics/{name}", {}).get("put")
    if detail:
        for code in ("200", "201"):
            detail["responses"][code]["links"] = _TOPIC_LINKS
        detail["responses"]["201"]["headers"] = {
            "Location": {
                "description": "Path of the new topic.",
                "required": True,
                "schema": {"type": "string"},
            }
        }
    return result
