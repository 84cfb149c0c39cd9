"""Reads of topics: a team's topics by name, with their endpoints."""

from __future__ import annotations

from django.db.models import Prefetch

from scheduling.topics.models import Topic, TopicEndpoint

# A topic's endpoints in id order, fetched with a page of topics.
ENDPOINTS_BY_NAME = Prefetch("endpoints", queryset=TopicEndpoint.objects.order_by("name"))


def topic_list(
    *, team_id: int | None = None, after: str | None = None, limit: int | None = None
) -> list[Topic]:
    """A team's topics by name (every team's with None: the console), endpoints fetched
    with them; ``after`` (a name) and ``limit`` page through them."""
    topics = (
        Topic.objects.select_related("team")
        .prefetch_related(ENDPOINTS_BY_NAME)
        .order_by("team_id", "name")
    )
    if team_id is not None:
        topics = topics.filter(team_id=team_id)
    if after is not None:
        topics = topics.filter(name__gt=after)
    if limit is not None:
        topics = topics[:limit]
    return list(topics)
