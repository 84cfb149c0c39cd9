"""Routes of the scheduling API, mounted at /api/v1/."""

from __future__ import annotations

from django.urls import path

from scheduling.api import team_views
from scheduling.api.flow import views as flow_views
from scheduling.api.jobs import views
from scheduling.api.schedules import views as schedule_views
from scheduling.api.topics import views as topic_views

urlpatterns = [
    path("jobs", views.JobListCreateView.as_view(), name="jobs"),
    path("jobs/bulk", views.JobBulkCreateView.as_view(), name="jobs-bulk"),
    path("jobs/cancel", views.JobCancelManyView.as_view(), name="jobs-cancel"),
    path("jobs/<uuid:job_id>", views.JobDetailView.as_view(), name="job-detail"),
    path("jobs/<uuid:job_id>/cancel", views.JobCancelView.as_view(), name="job-cancel"),
    path("jobs/<uuid:job_id>/attempts", views.JobAttemptsView.as_view(), name="job-attempts"),
    path("jobs/<uuid:job_id>/requeue", views.JobRequeueView.as_view(), name="job-requeue"),
    path("schedules", schedule_views.ScheduleListCreateView.as_view(), name="schedules"),
    path(
        "schedules/<uuid:schedule_id>",
        schedule_views.ScheduleDetailView.as_view(),
        name="schedule-detail",
    ),
    path(
        "schedules/<uuid:schedule_id>/pause",
        schedule_views.SchedulePauseView.as_view(),
        name="schedule-pause",
    ),
    path(
        "schedules/<uuid:schedule_id>/resume",
        schedule_views.ScheduleResumeView.as_view(),
        name="schedule-resume",
    ),
    path(
        "schedules/<uuid:schedule_id>/occurrences",
        schedule_views.ScheduleOccurrencesView.as_view(),
        name="schedule-occurrences",
    ),
    path("team", team_views.TeamDetailView.as_view(), name="team"),
    path("flow-controls", flow_views.FlowControlListView.as_view(), name="flow-controls"),
    path(
        "flow-controls/<str:key>",
        flow_views.FlowControlDetailView.as_view(),
        name="flow-control-detail",
    ),
    path(
        "flow-controls/<str:key>/pause",
        flow_views.FlowControlPauseView.as_view(),
        name="flow-control-pause",
    ),
    path(
        "flow-controls/<str:key>/resume",
        flow_views.FlowControlResumeView.as_view(),
        name="flow-control-resume",
    ),
    path("topics", topic_views.TopicListView.as_view(), name="topics"),
    path("topics/<str:name>", topic_views.TopicDetailView.as_view(), name="topic-detail"),
    path(
        "topics/<str:name>/endpoints/<str:endpoint>",
        topic_views.TopicEndpointView.as_view(),
        name="topic-endpoint",
    ),
    path(
        "topics/<str:name>/endpoints/<str:endpoint>/disable",
        topic_views.TopicEndpointDisableView.as_view(),
        name="topic-endpoint-disable",
    ),
    path(
        "topics/<str:name>/endpoints/<str:endpoint>/enable",
        topic_views.TopicEndpointEnableView.as_view(),
        name="topic-endpoint-enable",
    ),
]
