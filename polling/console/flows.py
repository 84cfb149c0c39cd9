"""Flow control in the console: every team's keys by waiting, pause and resume.

The list is read by ``scheduling.flow.selectors`` (a fixed number of grouped reads,
whatever the number of keys) and shown a page at a time. Pause and resume take the
shape of Django's ``delete_selected``: the key's button posts to a confirmation page
that asks for a reason; the confirmed POST calls ``flow_pause_set`` once, writes a
LogEntry with the reason and returns to the list with a message. Nothing here
updates a flow-control row itself.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from polling.console.actions import ConfirmForm
from polling.console.audit import audit
from polling.console.permissions import can_pause_flows, can_view
from scheduling.errors import SchedulingError
from scheduling.flow.models import FlowControl
from scheduling.flow.selectors import FlowState, flow_get, flow_states, flow_states_by_waiting
from scheduling.flow.services import KEY_MAX_CHARS, flow_pause_set
from scheduling.models import Job, JobStatus, Team

PAGE_SIZE = 50  # keys per page: thousands of keys never make one huge page
ACTIONS = {"pause": True, "resume": False}  # URL action -> the paused state it sets


def period_text(seconds: int) -> str:
    return f"{seconds} s"


def limits_text(flow: FlowControl) -> str:
    return f"{flow.rate} per {period_text(flow.period_seconds)}" if flow.rate else "—"


def rate_in_use_text(state: FlowState) -> str:
    """``"180 / 200 per 1 s (90 %)"``; without a rate limit, the count alone."""
    flow = state.flow
    if not flow.rate:
        return f"{state.delivered_in_period} (no rate limit)"
    share = (state.rate_in_use or 0.0) * 100
    return (
        f"{state.delivered_in_period} / {flow.rate} per {period_text(flow.period_seconds)}"
        f" ({share:.0f} %)"
    )


def _row(state: FlowState) -> dict[str, Any]:
    flow = state.flow
    return {
        "team": flow.team.slug,
        "key": flow.key,
        "limits": limits_text(flow),
        "parallelism": str(flow.parallelism) if flow.parallelism else "—",
        "waiting": state.waiting,
        "in_flight": state.in_flight,
        "rate_in_use": rate_in_use_text(state),
        "full": bool(flow.rate) and state.delivered_in_period >= (flow.rate or 0),
        "paused": flow.paused,
    }


def _require_view(request: HttpRequest) -> None:
    if not can_view(request.user):
        raise PermissionDenied


def _context(request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
    return {**admin.site.each_context(request), "title": title, "subtitle": None, **extra}


def flows_view(request: HttpRequest) -> HttpResponse:
    """Every team's keys, most waiting first, a page at a time (``?q=`` narrows)."""
    _require_view(request)
    if request.method != "GET":
        raise PermissionDenied
    states = flow_states_by_waiting()
    query = request.GET.get("q", "").strip()
    shown = states
    if query:
        needle = query.lower()
        shown = [s for s in states if needle in s.flow.key.lower() or needle == s.flow.team.slug]
    page = Paginator(shown, PAGE_SIZE).get_page(request.GET.get("page"))
    return TemplateResponse(
        request,
        "admin/console/flows.html",
        _context(
            request,
            "Flow control",
            page=page,
            rows=[_row(s) for s in page.object_list],
            query=query,
            total_keys=len(states),
            shown_keys=len(shown),
            rest=len(shown) - page.end_index() if shown else 0,
            summary={
                "keys": len(states),
                "paused": sum(1 for s in states if s.flow.paused),
                "waiting": sum(s.waiting for s in states),
                "in_flight": sum(s.in_flight for s in states),
            },
            can_pause=can_pause_flows(request.user),
            pause_form=FlowKeyForm(),
        ),
    )


class FlowKeyForm(forms.Form):
    """The key an action is about: a team (by slug) and one of its keys."""

    team = forms.CharField(max_length=64, label="Team (slug)")
    key = forms.CharField(max_length=KEY_MAX_CHARS, label="Flow-control key", strip=False)

    def __init__(self, *args: Any, paused: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.paused = paused
        self.flow: FlowControl | None = None
        self.team_row: Team | None = None

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        slug, key = data.get("team"), data.get("key")
        if not slug or not key:
            return data
        self.team_row = Team.objects.filter(slug=slug).first()
        if self.team_row is None:
            self.add_error("team", f"No team {slug!r}.")
            return data
        self.flow = flow_get(team_id=self.team_row.pk, key=key)
        if self.flow is None and not (self.paused and _has_pending_jobs(self.team_row, key)):
            # Pausing a key the team never limited records it (as the API does), but
            # only a key some pending job carries: a mistyped key is an error, not a row.
            self.add_error("key", f"No flow-control key {key!r} for team {slug!r}.")
        return data


def _has_pending_jobs(team: Team, key: str) -> bool:
    return Job.objects.filter(team=team, flow_control_key=key, status=JobStatus.PENDING).exists()


def _describe(form: FlowKeyForm) -> str:
    team, key, flow = form.team_row, form.cleaned_data["key"], form.flow
    assert team is not None
    if flow is None:
        state = flow_states([FlowControl(team=team, key=key)])[0]
        return (
            f"key {key!r} of team {team.slug}: no limits recorded (pausing records the key, "
            f"paused, without limits); {state.waiting} due job(s) waiting"
        )
    state = flow_states([flow])[0]
    parallelism = flow.parallelism or "unbounded"
    return (
        f"key {key!r} of team {team.slug}: {'paused' if flow.paused else 'active'}, rate "
        f"{limits_text(flow)}, parallelism {parallelism}; {state.waiting} waiting, "
        f"{state.in_flight} in flight"
    )


def flow_action_view(request: HttpRequest, action: str) -> HttpResponse:
    """Pause or resume one key: a confirmation page with a reason, then the service."""
    _require_view(request)
    if not can_pause_flows(request.user):
        raise PermissionDenied
    paused = ACTIONS[action]
    title = "Pause flow-control key" if paused else "Resume flow-control key"
    done_url = reverse("console-flows")
    source = request.POST if request.method == "POST" else request.GET
    target = FlowKeyForm(source, paused=paused)
    confirmed = request.method == "POST" and request.POST.get("post") == "yes"
    form = ConfirmForm(request.POST if confirmed else None)
    describe = _describe(target) if target.is_valid() else None
    if confirmed and describe is not None and form.is_valid():
        assert target.team_row is not None
        team, key = target.team_row, target.cleaned_data["key"]
        if target.flow is not None and target.flow.paused == paused:
            state = "paused" if paused else "active"
            messages.warning(request, f"Key {key!r} of team {team.slug} is already {state}.")
            return HttpResponseRedirect(done_url)
        try:
            flow = flow_pause_set(team=team, key=key, paused=paused)
        except SchedulingError as error:  # removed meanwhile, or not a key at all
            target.add_error("key", error.message)
            describe = None
        else:
            verb = "Paused" if paused else "Resumed"
            summary = f"{verb} flow-control key {key!r} of team {team.slug}."
            audit(user=request.user, obj=flow, action=summary, reason=form.cleaned_data["reason"])
            messages.success(request, summary)
            return HttpResponseRedirect(done_url)
    return TemplateResponse(
        request,
        "admin/console/confirm_target.html",
        _context(
            request,
            f"{title}: are you sure?",
            action_title=title,
            intro="A paused key's due jobs stay pending (their expiry still applies) and "
            "start in due order on resume.",
            action=action,
            describe=describe,
            target=target,
            form=form,
            cancel_url=done_url,
        ),
    )
