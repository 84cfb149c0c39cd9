"""API views: validate with a serializer, call one service or selector, serialize."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.urls import reverse
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling import tracing
from scheduling.api import pagination, schema
from scheduling.api.jobs import fastpath
from scheduling.api.jobs.bodies import (
    DeliveryAttemptListSerializer,
    JobBulkResultSerializer,
    JobCancelManyResultSerializer,
    JobPageSerializer,
    JobSerializer,
    job_body,
)
from scheduling.api.jobs.bulkplain import bulk_jobs_plain, bulk_result_body
from scheduling.api.jobs.fastpath import REPLAY_HEADER
from scheduling.api.jobs.serializers import (
    JobBulkCreateSerializer,
    JobCancelManySerializer,
    JobCreateSerializer,
    JobListQuerySerializer,
    JobRescheduleSerializer,
    job_spec_from,
    target_field,
)
from scheduling.jobs import cancels, deadletters, selectors, services
from scheduling.models import Team
from scheduling.storage.gcpause import gc_paused


class TeamView(APIView):
    """Authenticated by a team key; ``self.team`` is the caller's team."""

    throttle_scope = "jobs"

    @property
    def team(self) -> Team:
        return self.request.user.team


def _name_targets(request: Request, items: list[Any]) -> None:
    # The services call the target "target"; errors should use the request's name.
    request.sendlater_context = {
        "target_fields": {
            i: target_field(item) for i, item in enumerate(items) if isinstance(item, dict)
        }
    }


@extend_schema(tags=["jobs"])
class JobListCreateView(TeamView):
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "POST":  # the common create, without DRF's machinery
            response = fastpath.serve(self, request, fastpath.job_create)
            if response is not None:
                return response
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(
        operation_id="jobs_list",
        summary="List jobs",
        description="The team's jobs ordered by due_at (then id), one page at a time.",
        parameters=[JobListQuerySerializer],
        responses={200: JobPageSerializer, **schema.errors(*schema.COMMON)},
    )
    def get(self, request: Request) -> Response:
        query = JobListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        cursor, limit = pagination.page_params(params)
        jobs = selectors.job_list(
            team=self.team,
            status=params.get("status"),
            due_after=params.get("due_after"),
            due_before=params.get("due_before"),
            metadata=params.get("metadata"),
            schedule_id=params.get("schedule_id"),
            flow_control_key=params.get("flow_control_key"),
            after=pagination.cursor_decode(cursor) if cursor else None,
        )
        page, next_cursor = pagination.page_cut(
            jobs, limit, lambda job: pagination.cursor_encode(job.due_at, job.id)
        )
        return Response(pagination.page_body(request, [job_body(j) for j in page], next_cursor))

    @extend_schema(
        operation_id="jobs_create",
        summary="Schedule a job",
        request=JobCreateSerializer,
        responses={
            201: OpenApiResponse(JobSerializer, description="Scheduled."),
            200: OpenApiResponse(
                JobSerializer,
                description=f"Idempotent replay: the existing job ({REPLAY_HEADER}: true).",
            ),
            **schema.errors(*schema.WITH_BODY, 409),
        },
        examples=schema.CREATE_EXAMPLES,
    )
    def post(self, request: Request) -> Response:
        _name_targets(request, [request.data])
        serializer = JobCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        context = tracing.context_of_request(request.META)
        spec = job_spec_from(serializer.validated_data, context)
        job, created = services.job_schedule(team=self.team, **vars(spec))
        headers = {"Location": reverse("job-detail", kwargs={"job_id": job.id})}
        if not created:
            headers[REPLAY_HEADER] = "true"
        fastpath.trace_headers(headers, job.trace_context)
        return Response(
            job_body(job),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
            headers=headers,
        )


@extend_schema(tags=["jobs"])
class JobBulkCreateView(TeamView):
    throttle_scope = "jobs_bulk"

    @extend_schema(
        operation_id="jobs_bulk_create",
        summary="Schedule up to 1,000 jobs at once (all or nothing)",
        description=(
            "Every job is validated first; one invalid job fails the request with "
            "per-item fields (`jobs[17].due_at`) and nothing is written. Idempotency "
            "keys work per job; replays come back with `created: false`."
        ),
        request=JobBulkCreateSerializer,
        responses={
            201: OpenApiResponse(JobBulkResultSerializer, description="At least one new job."),
            200: OpenApiResponse(JobBulkResultSerializer, description="Every job was a replay."),
            **schema.errors(*schema.WITH_BODY, 409),
        },
        examples=[
            OpenApiExample(
                "Two reminders",
                request_only=True,
                value={
                    "jobs": [
                        {"due_at": "2027-03-01T09:00:00Z", "handler": "noop", "payload": {"n": 1}},
                        {
                            "due_at": "2027-03-01T10:00:00Z",
                            "callback_url": "https://example.com/hooks/reminder",
                            "payload": {"n": 2},
                            "metadata": {"booking": "42"},
                        },
                    ]
                },
            )
        ],
    )
    def post(self, request: Request) -> Response:
        with gc_paused():  # parse, validate and schedule up to 1,000 jobs
            return self._create(request)

    def _create(self, request: Request) -> Response:
        jobs = request.data.get("jobs") if isinstance(request.data, dict) else None
        _name_targets(request, jobs if isinstance(jobs, list) else [])
        items = bulk_jobs_plain(request.data)
        if items is None:
            serializer = JobBulkCreateSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            items = serializer.validated_data["jobs"]
        context = tracing.context_of_request(request.META)
        specs = [job_spec_from(item, context) for item in items]
        results = services.job_schedule_many(team=self.team, specs=specs)
        any_created = any(created for _, created in results)
        headers: dict[str, str] = {}
        fresh = next((job for job, created in results if created), None)
        fastpath.trace_headers(headers, fresh.trace_context if fresh else context)
        return Response(
            bulk_result_body(results),
            status=status.HTTP_201_CREATED if any_created else status.HTTP_200_OK,
            headers=headers,
        )


@extend_schema(tags=["jobs"], parameters=[schema.JOB_ID_PARAMETER])
class JobDetailView(TeamView):
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "GET":  # the common read, without DRF's machinery
            response = fastpath.serve(self, request, fastpath.job_read, **kwargs)
            if response is not None:
                return response
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(
        operation_id="jobs_retrieve",
        summary="Get a job",
        responses={200: JobSerializer, **schema.errors(*schema.COMMON, 404)},
    )
    def get(self, request: Request, job_id: str) -> Response:
        return Response(job_body(selectors.job_get(team=self.team, job_id=job_id)))

    @extend_schema(
        operation_id="jobs_reschedule",
        summary="Reschedule a pending job",
        description="Moves the job to its new bucket and shard in one transaction.",
        request=JobRescheduleSerializer,
        responses={200: JobSerializer, **schema.errors(*schema.WITH_BODY, 404, 409)},
        examples=[
            OpenApiExample("New time", request_only=True, value={"due_at": "2027-03-02T09:00:00Z"}),
        ],
    )
    def patch(self, request: Request, job_id: str) -> Response:
        serializer = JobRescheduleSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        job = services.job_reschedule(team=self.team, job_id=job_id, **serializer.validated_data)
        return Response(job_body(job))


@extend_schema(tags=["jobs"], parameters=[schema.JOB_ID_PARAMETER])
class JobCancelView(TeamView):
    @extend_schema(
        operation_id="jobs_cancel",
        summary="Cancel a pending job",
        description=(
            "A state change, not a deletion: the job stays readable (GET, attempts, "
            "list) with status `canceled`, which this answer already shows. That is "
            "why cancel is a POST here and the API has no DELETE on a job."
        ),
        request=None,
        responses={200: JobSerializer, **schema.errors(*schema.COMMON, 404, 409)},
    )
    def post(self, request: Request, job_id: str) -> Response:
        job = services.job_cancel(team=self.team, job_id=job_id)
        return Response(job_body(job))


@extend_schema(tags=["jobs"])
class JobCancelManyView(TeamView):
    throttle_scope = "jobs_bulk"

    @extend_schema(
        operation_id="jobs_cancel_many",
        summary="Cancel pending jobs by ids and/or metadata",
        description=(
            "Cancels every pending job of the team that matches all the given "
            "criteria, in one statement. Jobs that are not pending are left alone."
        ),
        request=JobCancelManySerializer,
        responses={200: JobCancelManyResultSerializer, **schema.errors(*schema.WITH_BODY)},
        examples=[
            OpenApiExample(
                "All reminders of a booking",
                request_only=True,
                value={"metadata": {"booking": "42"}},
            ),
            OpenApiExample("Result", response_only=True, value={"canceled": 3}),
        ],
    )
    def post(self, request: Request) -> Response:
        serializer = JobCancelManySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        canceled = cancels.job_cancel_many(team=self.team, **serializer.validated_data)
        return Response(JobCancelManyResultSerializer({"canceled": canceled}).data)


@extend_schema(tags=["jobs"], parameters=[schema.JOB_ID_PARAMETER])
class JobAttemptsView(TeamView):
    @extend_schema(
        operation_id="jobs_attempts",
        summary="List a job's delivery attempts",
        description="Every try, oldest first: start, duration, result, status code, error.",
        responses={200: DeliveryAttemptListSerializer, **schema.errors(*schema.COMMON, 404)},
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = selectors.job_get(team=self.team, job_id=job_id)
        attempts = selectors.delivery_attempt_list(job=job)
        return Response(DeliveryAttemptListSerializer({"attempts": attempts}).data)


@extend_schema(tags=["jobs"], parameters=[schema.JOB_ID_PARAMETER])
class JobRequeueView(TeamView):
    @extend_schema(
        operation_id="jobs_requeue",
        summary="Requeue a dead or expired job",
        description="A new attempt series (attempts start again at 1), due now.",
        request=None,
        responses={200: JobSerializer, **schema.errors(*schema.COMMON, 404, 409)},
    )
    def post(self, request: Request, job_id: str) -> Response:
        job = deadletters.job_requeue(team=self.team, job_id=job_id)
        return Response(job_body(job))
