"""The rows behind topics: a team's named topic and its endpoints."""

from __future__ import annotations

from django.db import models

from scheduling.choices import EndpointState

NAME_MAX_CHARS = 40  # a topic's and an endpoint's: together they fit a flow key (100)
DELIVERY_KEY_PREFIX = "topic:"
# A topic's name and an endpoint's id: a path segment, and part of a flow key.
NAME_PATTERN = rf"^[A-Za-z0-9._-]{{1,{NAME_MAX_CHARS}}}$"


class Topic(models.Model):
    """A team's named set of endpoints; a job naming it goes to each of them."""

    team = models.ForeignKey("scheduling.Team", on_delete=models.CASCADE, related_name="topics")
    name = models.CharField(max_length=NAME_MAX_CHARS)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["team", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="topic_team_name_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}:{self.name}"


class TopicEndpoint(models.Model):
    """One receiver of a topic: where its deliveries go and whether they may go now."""

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="endpoints")
    name = models.CharField(max_length=NAME_MAX_CHARS)  # the API's endpoint id
    url = models.CharField(max_length=2048)
    # The delivery contract's stored form (``scheduling.jobs.requests.request_stored``:
    # method, header names and sealed values, format, timeout, retry); NULL: default.
    request = models.JSONField(null=True, blank=True)
    # The key whose limits its deliveries obey; NULL: the endpoint's own (``delivery_key``).
    flow_control_key = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001 (NULL = the endpoint's own)
    state = models.CharField(
        max_length=16, choices=EndpointState.choices, default=EndpointState.ENABLED
    )
    disabled_reason = models.CharField(max_length=500, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    # Since when every delivery to it failed (NULL: the last one went through).
    failing_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["topic", "name"]
        constraints = [
            models.UniqueConstraint(fields=["topic", "name"], name="topicendpoint_topic_name_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.name}"


def delivery_key(topic: str, endpoint: str, flow_control_key: str | None) -> str:
    """The flow-control key an endpoint's deliveries carry: its own key if it names one,
    else ``topic:<topic>:<endpoint>``. Disabling the endpoint pauses this key."""
    return flow_control_key or f"{DELIVERY_KEY_PREFIX}{topic}:{endpoint}"
