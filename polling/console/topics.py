"""Topics in the console: every team's topics with their endpoints, enable and disable.

A page of topics at a time (``scheduling.topics.selectors.topic_list``, endpoints
fetched with them); per endpoint its state, since when its deliveries all fail, its
deliveries waiting (held while disabled) and its dead letters, each a grouped read
for the page. Enable and disable take the shape of Django's ``delete_selected``: the
endpoint's button posts to a confirmation page that asks for a reason; the confirmed
POST calls ``endpoint_state_set`` once, writes a LogEntry with the reason and returns
to the list with a message. Nothing here updates an endpoint row itself.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, prefetch_related_objects
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from polling.console.actions import ConfirmForm
from polling.console.audit import audit
from polling.console.permissions import can_change_endpoints, can_view
from scheduling.errors import SchedulingError
from scheduling.flow.models import FlowControl
from scheduling.flow.selectors import flow_states
from scheduling.models import Job, JobStatus, Topic, TopicEndpoint
from scheduling.topics.models import NAME_MAX_CHARS, delivery_key
from scheduling.topics.selectors import ENDPOINTS_BY_NAME
from scheduling.topics.services import endpoint_state_set

PAGE_SIZE = 25  # topics per page (each up to 100 endpoints)
ACTIONS = {"enable": True, "disable": False}  # URL action -> the state it sets


def _require_view(request: HttpRequest) -> None:
    if not can_view(request.user):
        raise PermissionDenied


def _context(request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
    return {**admin.site.each_context(request), "title": title, "subtitle": None, **extra}


def _endpoint_rows(topics: list[Topic]) -> dict[int, list[dict[str, Any]]]:
    """Each topic's endpoint rows: two grouped reads for the page (waiting, dead)."""
    keyed = [
        (topic, endpoint, delivery_key(topic.name, endpoint.name, endpoint.flow_control_key))
        for topic in topics
        for endpoint in topic.endpoints.all()
    ]
    flows = [FlowControl(team=topic.team, key=key) for topic, _, key in keyed]
    waiting = {(s.flow.team_id, s.flow.key): s.waiting for s in flow_states(flows)} if flows else {}
    dead: dict[tuple[int, str], int] = {}
    if keyed:
        rows = (
            Job.objects.filter(
                status=JobStatus.DEAD,
                team_id__in={topic.team_id for topic, _, _ in keyed},
                flow_control_key__in={key for _, _, key in keyed},
            )
            .values("team_id", "flow_control_key")
            .annotate(n=Count("id"))
        )
        dead = {(r["team_id"], r["flow_control_key"]): r["n"] for r in rows}
    out: dict[int, list[dict[str, Any]]] = {}
    for topic, endpoint, key in keyed:
        out.setdefault(topic.pk, []).append(
            {
                "id": endpoint.name,
                "url": endpoint.url,
                "key": key,
                "state": endpoint.state,
                "disabled": endpoint.state == "disabled",
                "disabled_reason": endpoint.disabled_reason,
                "failing_since": endpoint.failing_since,
                "waiting": waiting.get((topic.team_id, key), 0),
                "dead": dead.get((topic.team_id, key), 0),
            }
        )
    return out


def topics_view(request: HttpRequest) -> HttpResponse:
    """Every team's topics by team and name, a page at a time (``?team=`` narrows)."""
    _require_view(request)
    if request.method != "GET":
        raise PermissionDenied
    slug = request.GET.get("team", "").strip()
    topics = Topic.objects.select_related("team").order_by("team__slug", "name")
    if slug:
        topics = topics.filter(team__slug=slug)
    page = Paginator(topics, PAGE_SIZE).get_page(request.GET.get("page"))
    shown = list(page.object_list)
    prefetch_related_objects(shown, ENDPOINTS_BY_NAME)
    endpoints = _endpoint_rows(shown)
    return TemplateResponse(
        request,
        "admin/console/topics.html",
        _context(
            request,
            "Topics",
            page=page,
            rows=[
                {"team": t.team.slug, "name": t.name, "endpoints": endpoints.get(t.pk, [])}
                for t in shown
            ],
            team=slug,
            total=page.paginator.count,
            can_change=can_change_endpoints(request.user),
        ),
    )


class EndpointForm(forms.Form):
    """The endpoint an action is about: a team (by slug), its topic, the endpoint's id."""

    team = forms.CharField(max_length=64, label="Team (slug)")
    topic = forms.CharField(max_length=NAME_MAX_CHARS)
    endpoint = forms.CharField(max_length=NAME_MAX_CHARS)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.row: TopicEndpoint | None = None

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        slug, topic, name = data.get("team"), data.get("topic"), data.get("endpoint")
        if slug and topic and name:
            self.row = (
                TopicEndpoint.objects.select_related("topic__team")
                .filter(topic__team__slug=slug, topic__name=topic, name=name)
                .first()
            )
            if self.row is None:
                self.add_error("endpoint", f"No endpoint {name!r} in topic {topic!r} of {slug}.")
        return data


def _describe(row: TopicEndpoint) -> str:
    topic = row.topic
    key = delivery_key(topic.name, row.name, row.flow_control_key)
    (state,) = flow_states([FlowControl(team=topic.team, key=key)])
    failing = f", failing since {row.failing_since:%Y-%m-%d %H:%M} UTC" if row.failing_since else ""
    return (
        f"endpoint {row.name!r} of topic {topic.name!r} (team {topic.team.slug}): {row.state}"
        f"{failing}; {state.waiting} deliveries waiting; {row.url}"
    )


def endpoint_action_view(request: HttpRequest, action: str) -> HttpResponse:
    """Enable or disable one endpoint: a confirmation page with a reason, then the service."""
    _require_view(request)
    if not can_change_endpoints(request.user):
        raise PermissionDenied
    enabled = ACTIONS[action]
    title = "Enable topic endpoint" if enabled else "Disable topic endpoint"
    done_url = reverse("console-topics")
    source = request.POST if request.method == "POST" else request.GET
    target = EndpointForm(source)
    confirmed = request.method == "POST" and request.POST.get("post") == "yes"
    form = ConfirmForm(request.POST if confirmed else None)
    describe = _describe(target.row) if target.is_valid() and target.row else None
    if confirmed and target.row is not None and form.is_valid():
        row, reason = target.row, form.cleaned_data["reason"]
        wanted = "enabled" if enabled else "disabled"
        if row.state == wanted:
            messages.warning(request, f"Endpoint {row.name!r} is already {wanted}.")
            return HttpResponseRedirect(done_url)
        try:
            endpoint = endpoint_state_set(
                team=row.topic.team,
                topic=row.topic.name,
                name=row.name,
                enabled=enabled,
                reason=f"operator: {reason}",
            )
        except SchedulingError as error:  # removed meanwhile
            target.add_error("endpoint", error.message)
            describe = None
        else:
            verb = "Enabled" if enabled else "Disabled"
            summary = (
                f"{verb} endpoint {row.name!r} of topic {row.topic.name!r} "
                f"(team {row.topic.team.slug})."
            )
            audit(user=request.user, obj=endpoint, action=summary, reason=reason)
            messages.success(request, summary)
            return HttpResponseRedirect(done_url)
    return TemplateResponse(
        request,
        "admin/console/confirm_target.html",
        _context(
            request,
            f"{title}: are you sure?",
            action_title=title,
            intro="Its waiting deliveries start in due order, within its key's limits."
            if enabled
            else "Its waiting deliveries stay pending (their expiry still applies) until it "
            "is enabled again, and jobs falling due meanwhile leave it out.",
            describe=describe,
            target=target,
            form=form,
            cancel_url=done_url,
        ),
    )
