"""The caller's team and its delivery defaults: ``GET/PATCH /api/v1/team``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from scheduling.api import schema
from scheduling.api.fields import CallbackUrlField
from scheduling.api.jobs.serializers import StrictSerializer
from scheduling.api.jobs.views import TeamView
from scheduling.api.request_fields import RetryPolicySerializer
from scheduling.jobs.requests import RetryPolicy
from scheduling.jobs.team_defaults import UNSET, team_defaults_set, team_retry_policy
from scheduling.models import Team

TEAM_EXAMPLE = {
    "slug": "billing",
    "name": "Billing",
    "retry": {"max_attempts": 5, "min_backoff_seconds": 30, "max_backoff_seconds": 600},
    "default_on_failure_url": "https://example.com/hooks/job-failed",
    "service_retry": {"max_attempts": 10, "min_backoff_seconds": 10, "max_backoff_seconds": 3600},
}


class TeamDefaultsSerializer(StrictSerializer):
    retry = RetryPolicySerializer(
        required=False,
        allow_null=True,
        help_text="The team's retry policy: replaces the one set (null: none, the service's "
        "applies). A job's own retry wins over it, field by field.",
    )
    default_on_failure_url = CallbackUrlField(
        max_length=2048,
        required=False,
        allow_null=True,
        help_text="Told (job.dead, job.expired) when a job of the team ends dead or expired, "
        "unless the job gives on_failure_url. null: none.",
    )


class TeamSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    retry = RetryPolicySerializer(allow_null=True, help_text="The team's retry policy, if set.")
    default_on_failure_url = serializers.CharField(allow_null=True)
    service_retry = RetryPolicySerializer(
        help_text="The service's policy, for what neither the job nor the team sets."
    )


def _body(team: Team) -> dict[str, Any]:
    policy = team_retry_policy(team)
    return {
        "slug": team.slug,
        "name": team.name,
        "retry": policy.stored() if policy else None,
        "default_on_failure_url": team.default_on_failure_url or None,
        "service_retry": {
            "max_attempts": int(settings.SENDLATER_MAX_ATTEMPTS),
            "min_backoff_seconds": round(float(settings.SENDLATER_RETRY_BASE_SECONDS)),
            "max_backoff_seconds": round(float(settings.SENDLATER_RETRY_CAP_SECONDS)),
        },
    }


@extend_schema(tags=["team"])
class TeamDetailView(TeamView):
    @extend_schema(
        operation_id="team_retrieve",
        summary="Get the team's delivery defaults",
        responses={200: TeamSerializer, **schema.errors(*schema.COMMON)},
        examples=[OpenApiExample("Team", response_only=True, value=TEAM_EXAMPLE)],
    )
    def get(self, request: Request) -> Response:
        return Response(_body(Team.objects.get(pk=self.team.pk)))

    @extend_schema(
        operation_id="team_update",
        summary="Set the team's delivery defaults",
        description="What is given replaces the value set; what is not stays.",
        request=TeamDefaultsSerializer,
        responses={200: TeamSerializer, **schema.errors(*schema.WITH_BODY)},
        examples=[
            OpenApiExample(
                "Five tries, tell a URL when a job dies",
                request_only=True,
                value={
                    "retry": {"max_attempts": 5, "min_backoff_seconds": 30},
                    "default_on_failure_url": "https://example.com/hooks/job-failed",
                },
            ),
            OpenApiExample("Team", response_only=True, value=TEAM_EXAMPLE),
        ],
    )
    def patch(self, request: Request) -> Response:
        serializer = TeamDefaultsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        retry = data.get("retry", UNSET)
        team = team_defaults_set(
            team=self.team,
            retry=RetryPolicy(**retry) if retry and retry is not UNSET else retry,
            default_on_failure_url=data.get("default_on_failure_url", UNSET),
        )
        return Response(_body(team))
